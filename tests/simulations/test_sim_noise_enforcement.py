"""privacy.noise_enforcement = "add-then-remove" in the simulator: config keys, results.json, the noise left in the
sum (statistical test) and the certificate under dropouts."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from secagg_dp.errors import ConfigError
from secagg_dp.noise.add_then_remove import NoiseSchedule
from simulations.clients import RoundSpec, _client_noise, noise_master
from simulations.config import build_config, load_config
from simulations.privacy import make_accountant
from simulations.runner import aggregate_both_modes, plan
from tests.simulations.conftest import small_config

#: Two-sided false-failure rate of the variance test, and its normal critical value.
ALPHA = 1e-6
Z_CRIT = 4.8916  # scipy.stats.norm.isf(ALPHA / 2)


def test_config_keys_defaults_overrides_and_refusals() -> None:
    cfg = build_config(None, [])
    assert cfg.privacy.noise_enforcement == "none" and cfg.privacy.dropout_tolerance == 0.1
    cfg = build_config(
        None,
        ["privacy.mechanism=skellam", "privacy.noise_enforcement=add-then-remove", "privacy.dropout_tolerance=0.2"],
    )
    assert cfg.privacy.noise_enforcement == "add-then-remove" and cfg.privacy.dropout_tolerance == 0.2
    with pytest.raises(ConfigError, match="privacy.mechanism"):
        build_config(None, ["privacy.mechanism=ddg", "privacy.noise_enforcement=add-then-remove"])
    with pytest.raises(ConfigError, match="privacy.noise_enforcement"):
        build_config(None, ["privacy.noise_enforcement=remove-then-add"])
    with pytest.raises(ConfigError, match="privacy.dropout_tolerance"):
        build_config(None, ["privacy.mechanism=skellam", "privacy.dropout_tolerance=1.0"])


def test_results_json_records_both_keys(tmp_path) -> None:
    from simulations.study import run

    cfg = small_config(
        population={"clients": 16, "checkin": 0.75, "dropout": 0.05},
        secagg={"security": "semi-honest", "threshold_fraction": 0.3},
        privacy={"mechanism": "skellam", "noise_enforcement": "add-then-remove", "dropout_tolerance": 0.25},
    )
    run(cfg, tmp_path, plots=False)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["privacy"]["noise_enforcement"] == "add-then-remove"
    assert doc["privacy"]["dropout_tolerance"] == 0.25
    assert "EnforcedSkellamSum" in doc["privacy"]["event"]
    assert all(math.isfinite(r["epsilon"]) for r in doc["rounds"])


def test_noise_left_in_the_sum_has_the_target_variance() -> None:
    """Sum over the N - d survivors of what each keeps after removal (the simulator's noise rows, ideal mode):
    its sample variance over m coordinates against mu. For Skellam every cumulant of even order equals the
    variance, so Var(s^2) ~ (mu + 2 mu^2) / m; |z| <= Z_CRIT with false-failure rate ALPHA (normal law)."""
    mu, roster, m = 400.0, 30, 40_000
    for grouping_d in (0, 2, 3):  # D = 3 at tolerance 0.1
        schedule = NoiseSchedule(mu, roster, 0.1)
        gone = set(schedule.removable(grouping_d))
        kept = tuple(g for g in range(1, schedule.groups + 1) if g not in gone)
        spec = RoundSpec(
            task="mean", round=3, root_seed=5, n_clients=40, dim=m, bits=30, clip=1.0, scale=1.0,
            rotation_seed=0, beta=0.5, mechanism="skellam", sigma_int=1.0,
            enforcement=schedule, kept_groups=kept,
        )  # fmt: skip
        ids = np.arange(roster - grouping_d)
        total = _client_noise(spec, ids, m, np.random.default_rng(0)).sum(axis=0)
        target = schedule.total_variance(grouping_d)  # mu, plus the stated excess of grouping (d = 3: none)
        assert target == pytest.approx(mu if grouping_d in (0, 2, 3) else target)
        z = (float(np.var(total, ddof=1)) - target) / math.sqrt((target + 2 * target**2) / m)
        assert abs(z) <= Z_CRIT, (grouping_d, z)


def test_noise_master_is_per_client_and_round() -> None:
    spec = RoundSpec(
        task="mean", round=1, root_seed=0, n_clients=4, dim=2, bits=20, clip=1.0, scale=1.0, rotation_seed=0,
        beta=0.5, mechanism="skellam", sigma_int=1.0, noise_seed=9,
    )  # fmt: skip
    a, b = noise_master(spec, 3), noise_master(spec, 4)
    c = noise_master(dataclasses.replace(spec, noise_seed=10), 3)
    assert len(a) == 32 and len({a, b, c}) == 3 and noise_master(spec, 3) == a


@pytest.mark.parametrize(
    ("security", "neighbours", "dropout"),
    [("active", None, 0.03), ("semi-honest", None, 0.15), ("semi-honest", 6, 0.1)],
)
def test_crypto_round_is_bit_exact_against_the_ideal_one(security, neighbours, dropout) -> None:
    """The same seed in both modes: the ideal aggregator applies the removal the server makes, the crypto round
    adds every group in the clients and removes the survivors' groups in the server."""
    cfg = small_config(
        population={"clients": 16, "checkin": 0.9, "dropout": dropout},
        secagg={"bits": 24, "threshold_fraction": 0.3, "security": security, "neighbours": neighbours},
        privacy={"mechanism": "skellam", "noise_enforcement": "add-then-remove", "dropout_tolerance": 0.2},
    )
    for r in (1, 2, 3):
        ideal, crypto = aggregate_both_modes(cfg, round_=r)
        assert ideal is not None and crypto is not None
        assert np.array_equal(ideal, crypto)


def test_ideal_default_path_keeps_the_enforced_noise() -> None:
    """The ideal aggregator's default path (which may draw the round's noise as one sum) must not bypass
    enforcement: with add-then-remove it equals the crypto round bit for bit, as the per-client path does."""
    from simulations.executors import InProcessExecutor
    from simulations.runner import aggregate_round
    from simulations.tasks import make_task

    cfg = small_config(
        population={"clients": 16, "checkin": 0.9, "dropout": 0.05},
        secagg={"bits": 24, "threshold_fraction": 0.3, "security": "semi-honest"},
        privacy={"mechanism": "skellam", "noise_enforcement": "add-then-remove", "dropout_tolerance": 0.2},
    )
    root = cfg.seed if cfg.seed is not None else 0
    p = plan(cfg, root)
    model = make_task(cfg).init_model(root)
    ex = InProcessExecutor()
    for r in (1, 2):
        default = aggregate_round(cfg, p, root, r, model, ex, "ideal").aggregate
        crypto = aggregate_round(cfg, p, root, r, model, ex, "crypto").aggregate
        assert default is not None and crypto is not None
        assert np.array_equal(default, crypto)


@pytest.mark.slow
def test_enforced_epsilon_does_not_grow_with_dropout_up_to_the_tolerance() -> None:
    """The bundled dropout study with enforcement: the certified epsilon at p' in (0, tolerance] stays within
    1 % of (in fact below) its no-dropout value; without enforcement the server's ex-post epsilon grows."""
    eps = {}
    for p in (0.0, 0.02, 0.05, 0.1):
        cfg = load_config(
            "dropouts",
            [f"population.dropout={p}", "privacy.mechanism=skellam", "privacy.noise_enforcement=add-then-remove"],
        )
        acc = make_accountant(cfg, plan(cfg, 0), None)
        eps[p] = acc.planned_epsilon
        acc.close()
    assert all(eps[p] <= 1.01 * eps[0.0] for p in eps), eps


def test_cli_override_runs_both_modes(tmp_path) -> None:
    from simulations.cli import main

    for mode in ("ideal", "crypto"):
        out = tmp_path / mode
        args = ["simulate", "--out", str(out), "--no-plots", "--no-progress", "--seed", "2", f"mode={mode}"]
        args += ["rounds=2", "privacy.mechanism=skellam", "privacy.noise_enforcement=add-then-remove"]
        assert main(args) == 0
        doc = json.loads((out / "results.json").read_text())
        assert doc["privacy"]["noise_enforcement"] == "add-then-remove" and doc["privacy"]["dropout_tolerance"] == 0.1
