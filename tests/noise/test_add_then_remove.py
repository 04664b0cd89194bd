"""Add-then-remove Skellam noise: the telescoping claim, the seeded sampler's pmf and determinism, refusals."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import special, stats

from secagg_dp.errors import ParameterError
from secagg_dp.noise.add_then_remove import (
    NoiseSchedule,
    check_enforceable,
    client_noise,
    component,
    level_seeds,
    removed_noise,
    sample_skellam_seeded,
    seeded_skellam_pmf,
)
from tests.noise.noise_gof import ALPHA, chi2_gof


def _kept_by_definition(mu: Fraction, n: int, bounds: tuple[int, ...], d: int) -> Fraction:
    """Independent oracle: sum over the N - d survivors of level 0 plus every group NOT removed (a group is
    removed iff all its levels (b_{g-1}, b_g] are above d and d <= D), straight from the level definition
    v_j = mu (1/(N-j) - 1/(N-j+1)) summed level by level (no telescoping used)."""
    top = bounds[-1]
    per_client = mu / n
    for g in range(1, len(bounds)):
        removed = d <= top and bounds[g - 1] >= d
        if not removed:
            per_client += sum(
                (mu * (Fraction(1, n - j) - Fraction(1, n - j + 1)) for j in range(bounds[g - 1] + 1, bounds[g] + 1)),
                Fraction(0),
            )
    return (n - d) * per_client


@pytest.mark.parametrize("n", [1, 2, 7, 20, 101])
@pytest.mark.parametrize("tol", [0.0, 0.1, 0.35])
def test_every_level_leaves_exactly_the_target(n: int, tol: float) -> None:
    mu = Fraction(1000)
    s = NoiseSchedule(1000.0, n, tol, "every")
    assert s.max_dropouts == min(int(Fraction(tol) * n), n - 1)
    for d in range(0, s.max_dropouts + 1):
        assert _kept_by_definition(mu, n, s.boundaries, d) == mu  # the claim, exactly, for every d <= D
        assert s.total_variance(d) == pytest.approx(1000.0, rel=1e-12)
        assert s.excess_variance(d) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("n", [10, 64, 1000])
def test_grouped_levels_leave_at_least_the_target_and_the_stated_excess(n: int) -> None:
    mu = Fraction(500)
    s = NoiseSchedule(500.0, n, 0.1, "log2")
    bounds = s.boundaries
    assert bounds[0] == 0 and bounds[-1] == s.max_dropouts
    assert s.groups <= max(1, int(np.ceil(np.log2(max(s.max_dropouts, 1)))) + 1)
    for d in range(0, n + 1):
        exact = _kept_by_definition(mu, n, bounds, d)
        assert s.total_variance(d) == pytest.approx(float(exact), rel=1e-12)
        if d <= s.max_dropouts:
            assert exact >= mu
            assert s.certified_variance(d) == 500.0
            assert s.excess_variance(d) == pytest.approx(float(exact - mu), abs=1e-9)
        else:  # graceful degradation: nothing removed, the certificate uses what is there
            assert exact == (n - d) * mu / (n - s.max_dropouts)
            assert s.certified_variance(d) == pytest.approx(float(exact), rel=1e-12)


def test_removable_groups_are_exactly_those_above_d() -> None:
    s = NoiseSchedule(100.0, 100, 0.1, "log2")  # boundaries 0,1,2,4,8,10
    assert s.boundaries == (0, 1, 2, 4, 8, 10)
    assert s.removable(0) == (1, 2, 3, 4, 5)
    assert s.removable(3) == (4, 5)  # group 3 holds level 3 and 4: kept
    assert s.removable(8) == (5,)
    assert s.removable(10) == ()
    assert s.removable(11) == ()


@pytest.mark.parametrize("variance", [1e-3, 0.37, 6.0, 250.0, 40000.0])
def test_seeded_table_matches_the_skellam_pmf(variance: float) -> None:
    """Each table probability is within 2^-64 (plus double rounding) of e^{-v} I_k(v) (scipy's AMOS ive, an
    independent implementation), and the mass outside the table is below 1e-15."""
    k, p = seeded_skellam_pmf(variance)
    ref = special.ive(np.abs(k), variance)
    assert np.all(np.abs(p - ref) <= 2.0**-64 * (2 * k.size + 1) + 1e-14 * ref + 1e-300)
    assert 1.0 - ref.sum() < 1e-15


@pytest.mark.parametrize(("variance", "seed_byte"), [(0.37, 1), (6.0, 2), (250.0, 3)])
def test_seeded_sampler_chi_square_against_scipy(variance: float, seed_byte: int) -> None:
    """Pearson chi-square of 200 000 draws (fixed seed) against scipy.stats.skellam(v/2, v/2); false-failure
    rate ALPHA = 1e-6 per case (critical value chi2.isf(1e-6, df))."""
    x = sample_skellam_seeded(bytes([seed_byte]) * 16, variance, 200_000)
    half = int(6 * np.sqrt(variance)) + 6
    res = chi2_gof(x, lambda k: stats.skellam.pmf(k, variance / 2, variance / 2), half)
    assert ALPHA == 1e-6
    assert res.passed, res


def test_seeded_sampler_is_a_function_of_the_seed() -> None:
    a = sample_skellam_seeded(b"\x07" * 16, 12.5, 5000)
    b = sample_skellam_seeded(b"\x07" * 16, 12.5, 5000)
    c = sample_skellam_seeded(b"\x08" * 16, 12.5, 5000)
    assert a.dtype == np.int64 and np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(sample_skellam_seeded(b"\x07" * 16, 12.5, 100), a[:100])  # a prefix of one stream


def test_level_seeds_are_128_bit_and_distinct() -> None:
    seeds = level_seeds(b"\x01" * 32, 5)
    assert len(seeds) == 6 and all(len(s) == 16 for s in seeds) and len(set(seeds)) == 6


def test_removal_leaves_the_kept_noise_bit_for_bit() -> None:
    s = NoiseSchedule(300.0, 40, 0.2, "log2")
    master = b"\x33" * 32
    added = client_noise(s, master, 777)
    seeds = level_seeds(master, s.groups)
    for d in range(0, s.max_dropouts + 2):
        gone = s.removable(d)
        left = added - removed_noise(s, {g: seeds[g] for g in gone}, 777)
        keep = tuple(g for g in range(1, s.groups + 1) if g not in gone)
        assert np.array_equal(left, client_noise(s, master, 777, keep=keep))
    assert np.array_equal(client_noise(s, master, 50, keep=()), component(s, seeds[0], 0, 50))


def test_bad_inputs_name_the_parameter() -> None:
    with pytest.raises(ParameterError, match="tolerance"):
        NoiseSchedule(1.0, 10, 1.0)
    with pytest.raises(ParameterError, match="roster"):
        NoiseSchedule(1.0, 0, 0.1)
    with pytest.raises(ParameterError, match="grouping"):
        NoiseSchedule(1.0, 10, 0.1, "halves")
    with pytest.raises(ParameterError, match="target_variance"):
        NoiseSchedule(-1.0, 10, 0.1)
    with pytest.raises(ParameterError, match="seed"):
        sample_skellam_seeded(b"short", 1.0, 3)
    with pytest.raises(ParameterError, match="master"):
        level_seeds(b"x" * 16, 2)
    with pytest.raises(ParameterError, match="mechanism"):
        check_enforceable("ddg")
    with pytest.raises(ParameterError, match="group"):
        removed_noise(NoiseSchedule(1.0, 10, 0.3), {0: b"\x00" * 16}, 3)


def test_large_group_variance_is_split_into_seeded_parts() -> None:
    s = NoiseSchedule(3e9, 4, 0.5, "every")  # D = 2: group variances mu/12 and mu/6, above 1e8
    assert max(s.group_variances) > 1e8
    seeds = level_seeds(b"\x05" * 32, s.groups)
    a = component(s, seeds[2], 2, 3000)
    assert np.array_equal(a, component(s, seeds[2], 2, 3000))
    # variance check: |s^2 / v - 1| within 6 standard errors sqrt(2/m) (false-failure rate < 1e-8, normal law)
    assert abs(float(np.var(a)) / s.group_variances[1] - 1.0) < 6 * np.sqrt(2 / 3000)


@pytest.mark.parametrize("variance", [0.01, 3.0, 900.0, 2e6])
def test_prefix_lookup_equals_a_plain_search_of_the_table(variance: float) -> None:
    """The sampler's 16-bit prefix shortcut gives, word for word, the inverse CDF by binary search."""
    from secagg_dp.crypto import kdf
    from secagg_dp.crypto.prg import keystream
    from secagg_dp.noise.add_then_remove import _table

    seed = b"\x11" * 16
    thr, half = _table(variance)
    words = np.frombuffer(keystream(kdf.derive(seed, info=kdf.LABEL_NOISE_COMPONENT), 8 * 50_000), dtype="<u8")
    want = np.searchsorted(thr, words, side="right").astype(np.int64) - half
    assert np.array_equal(sample_skellam_seeded(seed, variance, 50_000), want)
