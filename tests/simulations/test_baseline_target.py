"""The non-private baseline (``privacy.mechanism = "none"``, ``baseline = true``) and the calibrated noise
(``privacy.target_epsilon``).

Oracles: the baseline's aggregate is recomputed by encoding the round's participants again with a fresh
:class:`~secagg_dp.quantize.ZqCodec` (same scale, rotation seed and block generators, no noise) and summing the
included rows with Python integers mod 2^bits; the calibrated z is checked by building the simulator's
accountant anew at z and at z (1 - 2e-3) (the analyst's epsilon also through the library's
:class:`~secagg_dp.accounting.checkin.CheckinAccountant` directly), never by reading the calibration's own
numbers back.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from secagg_dp.errors import ConfigError
from secagg_dp.quantize import ZqCodec
from simulations.calibrate import REL_TOL, calibrate
from simulations.clients import PURPOSE_ROTATION, block_rng, blocks_of
from simulations.executors import InProcessExecutor
from simulations.privacy import SimAccountant, make_accountant
from simulations.runner import _round_int, aggregate_round, plan, run_scenario
from simulations.study import run
from tests.simulations.conftest import small_config

BITS = 20


def _none_cfg(mode: str = "ideal", **privacy):
    return small_config(
        mode=mode,
        population={"clients": 12, "checkin": 0.8, "dropout": 0.1},
        secagg={"bits": BITS, "security": "semi-honest"},
        privacy={"mechanism": "none", **privacy},
        task={"name": "mean", "dim": 6},
    )


def _noiseless_sum(cfg, p, ra, model) -> list[int]:
    """Encode every participant again, block by block with its block's generator and no noise, and sum the
    included clients' rows with Python ints mod 2^bits."""
    from simulations.tasks import make_task

    task = make_task(cfg)
    root, r = cfg.seed, ra.spec.round
    codec = ZqCodec(
        p.dim,
        BITS,
        cfg.privacy.clip,
        p.scale,
        rotation_seed=_round_int(root, r, PURPOSE_ROTATION),
        beta=cfg.privacy.beta,
    )
    included = set(ra.included.tolist())
    total = [0] * codec.padded_dim
    for index, ids, _ in blocks_of(ra.ids):
        rows = task.client_vectors(model, ids, r, root)
        enc = codec.encode(np.asarray(rows, dtype=float), rng=block_rng(root, r, index, cfg.rng))
        for cid, row in zip(ids.tolist(), enc, strict=True):
            if cid in included:
                total = [t + int(v) for t, v in zip(total, row.tolist(), strict=True)]
    return [t % (1 << BITS) for t in total]


@pytest.mark.parametrize("mode", ["ideal", "crypto"])
def test_mechanism_none_is_the_noiseless_codec_sum(mode):
    cfg = _none_cfg(mode)
    p = plan(cfg, cfg.seed)
    private = plan(replace(cfg, privacy=replace(cfg.privacy, mechanism="ddg")), cfg.seed)
    assert p.sigma_int == 0.0 and private.sigma_int > 0  # no noise ...
    assert p.scale == private.scale  # ... on the private run's codec
    from simulations.tasks import make_task

    model = make_task(cfg).init_model(cfg.seed)
    ra = aggregate_round(cfg, p, cfg.seed, 1, model, InProcessExecutor(), mode)
    assert ra.aggregate is not None and 0 < len(ra.included) < len(ra.ids)  # a dropout happened
    assert ra.aggregate.tolist() == _noiseless_sum(cfg, p, ra, model)


def test_mechanism_none_records_infinite_epsilon_with_its_reason_and_no_ledger(tmp_path):
    cfg = _none_cfg()
    run_scenario(cfg, tmp_path)
    doc = json.loads((tmp_path / "results.json").read_text())
    reason = "no noise (mechanism none): no privacy"
    assert doc["status"] == "complete"
    assert doc["privacy"]["epsilon"] is None and doc["privacy"]["epsilon_reason"] == reason
    assert doc["privacy"]["server"]["epsilon"] is None and doc["privacy"]["coalition"]["epsilon_reason"] == reason
    assert all(r["epsilon"] is None and r["epsilon_reason"] == reason for r in doc["rounds"])
    assert doc["summary"]["epsilon"] is None and doc["summary"]["epsilon_reason"] == reason
    assert not (tmp_path / "ledger.sqlite").exists()


def test_mechanism_none_refuses_a_budget_a_target_and_noise_enforcement():
    with pytest.raises(ConfigError, match=r"'privacy.epsilon_budget' cannot be set with privacy.mechanism = 'none'"):
        _none_cfg(epsilon_budget=3.0)
    with pytest.raises(ConfigError, match=r"'privacy.target_epsilon' cannot be set"):
        _none_cfg(target_epsilon=3.0)
    with pytest.raises(ConfigError, match=r"noise_enforcement' must be 'none' with privacy.mechanism = 'none'"):
        _none_cfg(noise_enforcement="add-then-remove")
    with pytest.raises(ConfigError, match=r"'baseline' = true needs a private run"):
        small_config(baseline=True, privacy={"mechanism": "none"})


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_zero_noise_multiplier_points_to_mechanism_none(mechanism):
    with pytest.raises(ConfigError, match=r"noise_multiplier' must be > 0.*privacy.mechanism = 'none'"):
        small_config(privacy={"mechanism": mechanism, "noise_multiplier": 0})


def test_baseline_runs_the_same_scenario_without_noise_beside_the_private_run(tmp_path):
    cfg = small_config(
        baseline=True,
        population={"clients": 12, "checkin": 0.8, "dropout": 0.1},
        secagg={"security": "semi-honest"},
    )
    doc = run(cfg, tmp_path, plots=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    base = saved["baseline"]
    assert base["privacy"]["epsilon"] is None and base["privacy"]["epsilon_reason"].startswith("no noise")
    assert [r["round"] for r in base["rounds"]] == [r["round"] for r in saved["rounds"]] == [1, 2]
    # the same check-ins and dropouts (same seed), different errors: the private run's noise only
    assert [r["included"] for r in base["rounds"]] == [r["included"] for r in saved["rounds"]]
    priv_mse = [r["metrics"]["mse"] for r in saved["rounds"]]
    base_mse = [r["metrics"]["mse"] for r in base["rounds"]]
    assert all(b < 1e-3 * m for b, m in zip(base_mse, priv_mse, strict=True))
    sub = json.loads((tmp_path / "baseline" / "results.json").read_text())
    assert sub["config"]["privacy"]["mechanism"] == "none"
    assert sub["config"]["privacy"]["noise_multiplier"] == saved["config"]["privacy"]["noise_multiplier"]
    assert doc["baseline"]["summary"]["final_metrics"]["mse"] == base_mse[-1]


def test_baseline_plot_has_both_curves(tmp_path):
    pytest.importorskip("matplotlib")
    from simulations.plots import plot_run

    cfg = small_config(baseline=True, secagg={"security": "semi-honest"})
    doc = run(cfg, tmp_path, plots=False)
    import matplotlib.pyplot as plt

    closed: list = []
    real_close = plt.close

    def spy(fig=None):  # look at the figure plot_run draws before it is closed
        if fig is not None and hasattr(fig, "axes"):
            closed.append([len(ax.get_lines()) for ax in fig.axes])
        return real_close(fig)

    plt.close = spy
    try:
        plot_run(doc, tmp_path)
    finally:
        plt.close = real_close
    assert closed and closed[0][0] == 2  # the metric panel: private and no-noise curves


def _eps(cfg, z: float, observer: str) -> float:
    """The simulator's accountant built anew at noise multiplier z: the planned certificate for ``observer``."""
    c = replace(cfg, privacy=replace(cfg.privacy, noise_multiplier=z, target_epsilon=None))
    acct = SimAccountant(c, plan(c, c.seed), None)
    try:
        return {"analyst": acct.planned_epsilon, "server": acct.server_planned_epsilon}[observer]
    finally:
        acct.close()


def _target_cfg(observer: str, target: float = 3.0):
    return small_config(
        rounds=3,
        population={"clients": 20, "checkin": 0.5, "dropout": 0.05},
        privacy={"target_epsilon": target, "observer": observer, "method": "rdp"},
    )


@pytest.mark.parametrize("observer", ["analyst", "server"])
def test_target_epsilon_gives_the_smallest_certified_noise(observer):
    cfg = _target_cfg(observer)
    calibrated, cal = calibrate(cfg, cfg.seed, planner=plan)
    z = calibrated.privacy.noise_multiplier
    assert cal.noise_multiplier == z and cal.observer == observer
    assert _eps(cfg, z, observer) <= 3.0 < _eps(cfg, z * (1 - 2 * REL_TOL), observer)
    if observer == "analyst":  # the library's accountant directly on the simulator's event
        from secagg_dp.accounting.checkin import CheckinAccountant

        c = replace(cfg, privacy=replace(cfg.privacy, target_epsilon=None))
        for zz, ok in ((z, True), (z * (1 - 2 * REL_TOL), False)):
            cz = replace(c, privacy=replace(c.privacy, noise_multiplier=zz))
            acct = SimAccountant(cz, plan(cz, cz.seed), None)
            eps = CheckinAccountant("rdp", acct.neighbouring).compose(acct.event, 3).certificate(1e-5).epsilon
            acct.close()
            assert (eps <= 3.0) is ok


def test_target_epsilon_is_recorded_and_wins_over_the_configured_noise(tmp_path):
    cfg = _target_cfg("analyst")
    doc = run_scenario(cfg, tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())
    priv = saved["privacy"]
    assert priv["calibrated"] is True and priv["target_epsilon"] == 3.0
    assert priv["noise_multiplier"] == saved["config"]["privacy"]["noise_multiplier"] != 1.0
    assert priv["calibration"]["configured_noise_multiplier"] == 1.0
    assert saved["summary"]["epsilon"] <= 3.0
    assert doc["privacy"]["planned_epsilon"] <= 3.0


def test_target_epsilon_bad_values_are_refused():
    for bad in (0, -1.0, "4", math.inf):
        with pytest.raises(ConfigError, match="privacy.target_epsilon"):
            small_config(privacy={"target_epsilon": bad})
    with pytest.raises(ConfigError, match="privacy.observer"):
        small_config(privacy={"observer": "nobody"})
    with pytest.raises(ConfigError, match="'baseline'"):
        small_config(baseline="yes")
    cfg = small_config(privacy={"target_epsilon": 1e-4})
    with pytest.raises(ConfigError, match=r"'privacy.target_epsilon' = 0.0001 cannot be met for observer 'analyst'"):
        calibrate(cfg, cfg.seed, planner=plan)


def test_make_accountant_without_noise_is_not_charged():
    cfg = _none_cfg()
    acct = make_accountant(cfg, plan(cfg, cfg.seed))
    assert acct.record_round() == (math.inf, None)
    assert acct.describe()["ledger"] is None


def test_study_variants_keep_the_baseline_key():
    from simulations.config import expand_study

    cfg = small_config(baseline=True, study={"grid": {"population.dropout": [0.0, 0.1]}})
    variants = expand_study(cfg)
    assert len(variants) == 2 and all(v.baseline for _, _, v in variants)


def test_one_observer_certificate_is_the_full_accountants():
    """What the calibration evaluates (one observer, no ledger) equals what the run's accountant reports."""
    cfg = small_config(
        rounds=3, population={"clients": 20, "checkin": 0.5, "dropout": 0.05}, secagg={"corrupt_clients": 1}
    )
    p = plan(cfg, cfg.seed)
    full = SimAccountant(cfg, p, None)
    want = {
        "analyst": full.planned_epsilon,
        "server": full.server_planned_epsilon,
        "coalition": full.coalition_planned_epsilon,
    }
    full.close()
    assert want["analyst"] < want["server"] < want["coalition"]
    for observer, eps in want.items():
        assert SimAccountant.planned_epsilon_for(cfg, p, observer) == eps


# -- with random check-ins (population.participation = "random-checkin", merged from main) --------------------------
_RC_POP = {
    "clients": 20,
    "checkin": 0.5,
    "dropout": 0.05,
    "participation": "random-checkin",
    "epoch_rounds": 3,
    "slots": 2,
}


def test_target_epsilon_with_random_checkins_uses_their_certificate():
    """The calibration certifies with the accountant the run is certified by (random check-ins, not the per-round
    coin); oracle: the library's RandomCheckinAccountant composed over the planned epochs directly."""
    from secagg_dp.accounting.checkin.random_checkin import RandomCheckinAccountant
    from simulations.privacy import RandomCheckinSimAccountant

    cfg = small_config(rounds=4, population=_RC_POP, privacy={"target_epsilon": 3.0, "method": "rdp"})
    calibrated, cal = calibrate(cfg, cfg.seed, planner=plan)
    z = calibrated.privacy.noise_multiplier
    assert cal.noise_multiplier == z and cal.epsilon <= 3.0
    for zz, ok in ((z, True), (z * (1 - 2 * REL_TOL), False)):
        cz = replace(cfg, privacy=replace(cfg.privacy, noise_multiplier=zz, target_epsilon=None))
        acct = RandomCheckinSimAccountant(cz, plan(cz, cz.seed), None)
        # 4 rounds in epochs of 3: two epochs, the partial one charged in full
        # slots = 2: the simulator charges the analyst the server's curve (per-round drops)
        lib = RandomCheckinAccountant(acct.neighbouring, observer="analyst", method="rdp", amplified=False)
        eps = lib.compose(acct.event, 2).certificate(cz.privacy.delta).epsilon
        acct.close()
        assert (eps <= 3.0) is ok
    # the per-round coin's certificate at the chosen z is a different number: calibrating with it would be wrong
    coin = small_config(
        rounds=4,
        population={"clients": 20, "checkin": 0.5, "dropout": 0.05},
        privacy={"noise_multiplier": z, "method": "rdp"},
    )
    assert SimAccountant.planned_epsilon_for(coin, plan(coin, coin.seed), "analyst") != pytest.approx(cal.epsilon)


def test_mechanism_none_with_random_checkins_is_not_charged(tmp_path):
    cfg = small_config(rounds=4, population=_RC_POP, privacy={"mechanism": "none"})
    acct = make_accountant(cfg, plan(cfg, cfg.seed), tmp_path / "ledger.db")
    assert acct.record_round() == (math.inf, None)
    assert acct.describe()["ledger"] is None and not (tmp_path / "ledger.db").exists()


def test_baseline_with_random_checkins_has_the_same_participation(tmp_path):
    cfg = small_config(rounds=4, baseline=True, population=_RC_POP, secagg={"security": "semi-honest"})
    run(cfg, tmp_path, plots=False)
    saved = json.loads((tmp_path / "results.json").read_text())
    base = saved["baseline"]
    assert base["privacy"]["epsilon"] is None
    assert [r["included"] for r in base["rounds"]] == [r["included"] for r in saved["rounds"]]
    assert saved["privacy"]["participation"] == "random-checkin" and saved["privacy"]["epochs"] == 2


def test_calibration_post_condition_is_checked_not_asserted():
    """The last step refuses a noise multiplier whose certificate misses the target with an error that survives
    ``python -O`` (an assert would not), and accepts one that meets it."""
    from secagg_dp.errors import PrivacyBudgetExceeded
    from simulations.calibrate import _done

    cfg = small_config(rounds=2, privacy={"target_epsilon": 3.0})
    with pytest.raises(PrivacyBudgetExceeded, match="target_epsilon"):
        _done(cfg, 1.5, 3.01, 7)
    done, cal = _done(cfg, 1.5, 2.99, 7)
    assert done.privacy.noise_multiplier == 1.5 and cal.epsilon == 2.99
