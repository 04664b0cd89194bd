"""secagg_dp.plan: the Mechanism value (validation, draw, accounting bases) and the DPPlan value (computed once,
validated, the same plan for the simulator and the Flower path); the stage constants the dropout model reads."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from secagg_dp.accounting.checkin.bases import DDGSum, SkellamSum
from secagg_dp.errors import ParameterError
from secagg_dp.noise import sample_discrete_gaussian, sample_skellam
from secagg_dp.plan import MECHANISMS, SIGMA_INT_MAX, DPPlan, Mechanism
from secagg_dp.quantize import ZqCodec

#: Two-sided false-failure rate of the variance test and its normal critical value (scipy.stats.norm.isf(5e-7)).
ALPHA, Z_CRIT = 1e-6, 4.8916


def test_mechanism_is_validated_and_frozen() -> None:
    assert MECHANISMS == ("ddg", "skellam")
    with pytest.raises(ParameterError, match="'mechanism'.*'gaussian'"):
        Mechanism("gaussian")
    m = Mechanism("skellam")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name = "ddg"  # type: ignore[misc]
    assert m.infinitely_divisible and not Mechanism("ddg").infinitely_divisible
    assert str(m) == "skellam" and Mechanism("ddg") == Mechanism("ddg")
    # equal to its name (and hashed like it), never silently unequal to the string it was made from
    assert m == "skellam" and "skellam" == m and m != "ddg" and m != Mechanism("ddg") and m != 3
    assert {m: 1}["skellam"] == 1 and len({m, Mechanism("skellam")}) == 1


@pytest.mark.parametrize("name", MECHANISMS)
def test_draw_is_the_sampler_on_the_same_stream(name: str) -> None:
    got = Mechanism(name).draw(3.5, 50, np.random.default_rng(4))
    rng = np.random.default_rng(4)
    want = sample_discrete_gaussian(3.5, 50, rng=rng) if name == "ddg" else sample_skellam(3.5**2, 50, rng=rng)
    assert got.dtype == np.int64 and np.array_equal(got, want)


def test_skellam_draw_has_the_stated_variance() -> None:
    """Var of Sk(s^2) is s^2 and its fourth cumulant is s^2 too, so Var(sample variance) ~ (s^2 + 2 s^4) / m;
    |z| <= Z_CRIT with false-failure rate ALPHA (normal approximation, m = 200 000)."""
    s2, m = 9.0, 200_000
    x = Mechanism("skellam").draw(3.0, m, np.random.default_rng(1))
    z = (float(np.var(x, ddof=1)) - s2) / math.sqrt((s2 + 2 * s2**2) / m)
    assert abs(z) <= Z_CRIT


def test_accounting_bases_are_the_papers_sums() -> None:
    orders = np.array([2.0, 8.0, 32.0])
    k = np.array([5.0])
    got = Mechanism("skellam").sum_base(40.0, 16, 20.0, 60.0).rdp_upper(k, k, orders)
    want = SkellamSum(1600.0, 20.0, 60.0).rdp_upper(k, k, orders)
    assert np.array_equal(got, want)
    got = Mechanism("ddg").sum_base(40.0, 16, 20.0, 60.0).rdp_upper(k, k, orders)
    want = DDGSum(40.0, 16, 20.0, 60.0).rdp_upper(k, k, orders)
    assert np.array_equal(got, want)


def _plan(**kw: object) -> DPPlan:
    args: dict[str, object] = {"clip": 1.0, "noise_multiplier": 2.0, "expected_clients": 16.0, "bits": 20, "dim": 24}
    args.update(kw)
    return DPPlan(**args)  # type: ignore[arg-type]


def test_plan_is_computed_once_from_its_inputs() -> None:
    p = _plan(k_stddevs=4.0)
    assert p.sigma_local == 2.0 * 1.0 / 4.0  # z C / sqrt(K_exp) = 2 / sqrt(16), exact
    assert not p.scale_capped and p.scale == p.scale_rule
    assert p.sigma_int == p.sigma_local * p.scale
    codec = ZqCodec(24, 20, 1.0, p.scale, rotation_seed=0)
    assert p.padded_dim == 32 == codec.padded_dim  # next power of two of 24
    assert (p.l2_sensitivity, p.l1_sensitivity) == (codec.l2_sensitivity, codec.l1_sensitivity)
    assert p.enforced_target_variance() == 16.0 * p.sigma_int**2
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.scale = 1.0  # type: ignore[misc]
    # more clients to fit in Z_q leave a smaller scale
    assert _plan(k_stddevs=4.0, scale_clients=64).scale < p.scale


def test_wide_bits_cap_the_grid_std_at_the_samplers_range() -> None:
    p = _plan(bits=62)
    assert p.scale_capped and p.scale < p.scale_rule
    assert p.sigma_int <= SIGMA_INT_MAX and p.sigma_int == pytest.approx(1e6, rel=1e-12)
    assert p.scale == pytest.approx(1e6 / p.sigma_local, rel=1e-12)


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"bits": 2}, "'bits'"),
        ({"bits": 62, "noise_multiplier": 1e7}, "'noise_multiplier'"),
        ({"clip": 0.0}, "'clip'"),
        ({"expected_clients": -1.0}, "'expected_clients'"),
        ({"dim": 0}, "'dim'"),
        ({"mechanism": "ddg"}, "'mechanism'"),
        ({"local_steps": 0}, "'local_steps'"),
    ],
)
def test_bad_inputs_name_the_argument(kw: dict[str, object], name: str) -> None:
    with pytest.raises(ParameterError, match=name):
        _plan(**kw)


def test_simulator_and_flower_stand_on_the_same_plan() -> None:
    from simulations.flower.core import FlowerDPConfig
    from simulations.runner import plan
    from tests.simulations.conftest import small_config

    fl = FlowerDPConfig(dim=24, clip=1.0, noise_multiplier=2.0, sample_size=16, population=40, threshold=3)
    assert fl.plan == _plan(scale_clients=16)
    assert (fl.scale, fl.sigma_int, fl.codec.l2_sensitivity) == (
        fl.plan.scale,
        fl.plan.sigma_int,
        fl.plan.l2_sensitivity,
    )
    cfg = small_config(population={"sampling": "fixed", "clients": 32, "checkin": 0.5})
    p = plan(cfg, 11)
    assert p.dp is not None and p.noise is None
    assert (p.scale, p.sigma_int, p.l2_sensitivity, p.padded_dim) == (
        p.dp.scale,
        p.dp.sigma_int,
        p.dp.l2_sensitivity,
        p.dp.padded_dim,
    )
    assert "dp" not in p.as_dict() and "noise" not in p.as_dict()


def test_noise_enforcement_is_parsed_once_into_a_noise_spec() -> None:
    from simulations.runner import plan
    from tests.simulations.conftest import small_config

    cfg = small_config(
        privacy={"mechanism": "skellam", "noise_enforcement": "add-then-remove", "dropout_tolerance": 0.25}
    )
    p = plan(cfg, 11)
    assert p.noise is not None and p.noise.tolerance == 0.25 and p.noise.grouping == "log2"
    assert p.noise.target_variance == 12.0 * p.sigma_int**2  # K_exp = 0.75 * 16 expected check-ins


def test_stage_constants() -> None:
    """The protocol's stage model (Bonawitz et al. 2017, Sec. 4): 3 stages before the masked input lose a dropped
    client's noise, 1 (advertise_keys) keeps it out of the roster; the simulator draws 4 (no consistency)."""
    from secagg_dp.accounting.checkin.dropout import effective_checkin_rate
    from secagg_dp.stages import (
        DROPOUT_STAGES,
        PROTOCOL_DROPOUT_STAGES,
        ROSTER_DROPOUT_STAGES,
        ROSTER_STAGE,
        stages_for,
    )
    from simulations import aggregators
    from simulations.cli import build_parser

    assert (PROTOCOL_DROPOUT_STAGES, ROSTER_DROPOUT_STAGES, ROSTER_STAGE) == (3, 1, "advertise_keys")
    assert DROPOUT_STAGES == ("advertise_keys", "share_keys", "masked_input", "unmasking") == stages_for("semi-honest")
    assert aggregators.STAGES is DROPOUT_STAGES and aggregators.IN_ROSTER_FROM == 1
    assert effective_checkin_rate(0.5, 0.1) == 0.5 * 0.9**3
    argv = ["account", "checkin", "--p", "0.5", "--dropout", "0.1", "--sigma", "1", "--n", "10"]
    args = build_parser().parse_args([*argv, "--rounds", "1", "--delta", "1e-5"])
    assert args.dropout_stages == 3


def test_round_spec_carries_values_not_strings_and_tuples() -> None:
    from secagg_dp.noise.add_then_remove import NoiseSchedule
    from simulations.clients import RoundSpec, noise_schedule

    base = {"task": "mean", "round": 1, "root_seed": 0, "n_clients": 4, "dim": 2, "bits": 20, "clip": 1.0}
    base.update(scale=1.0, rotation_seed=0, beta=0.5, sigma_int=1.0)
    spec = RoundSpec(**base, mechanism="skellam", enforcement=NoiseSchedule(9.0, 4, 0.25))  # type: ignore[arg-type]
    assert spec.mechanism == Mechanism("skellam") and noise_schedule(spec) is spec.enforcement
    with pytest.raises(TypeError, match="'enforcement'"):
        RoundSpec(**base, mechanism="skellam", enforcement=(9.0, 4, 0.25))  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="'mechanism'"):
        RoundSpec(**base, mechanism="laplace")  # type: ignore[arg-type]
