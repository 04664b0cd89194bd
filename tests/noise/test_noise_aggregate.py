"""The sum of K parties' noise drawn directly (secagg_dp.noise.aggregate).

Oracles: the exact law of the sum, computed by convolving the exact one-party pmf K times (the discrete
Gaussian pmf written out here from its definition, exp(−x²/2σ²)/Σ; Skellam from scipy.stats.skellam, not our
Bessel code). Statistical tests use fixed seeds and the false-failure rate ALPHA = 1e-6 of noise_gof.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from noise_gof import ALPHA, chi2_gof, z_two_sided
from scipy import stats

from secagg_dp.errors import ParameterError
from secagg_dp.noise.aggregate import (
    TV_BUDGET,
    discrete_gaussian_sum_log_tv_bound,
    discrete_gaussian_sum_tv_bound,
    noise_sum_plan,
    sample_noise_sum,
)


def _dg_pmf(sigma: float, half: int) -> np.ndarray:
    """N_Z(0, σ²) on [−half, half] from the definition (normalised over that window; the rest is < 1e-300)."""
    k = np.arange(-half, half + 1, dtype=np.float64)
    w = np.exp(-(k * k) / (2.0 * sigma * sigma))
    return w / w.sum()


def _kfold(p: np.ndarray, k: int) -> np.ndarray:
    out = p
    for _ in range(k - 1):
        out = np.convolve(out, p)
    return out


def _exact_tv(sigma: float, k: int) -> float:
    """d_TV(sum of k independent N_Z(0, σ²), N_Z(0, kσ²)) by convolution (both on [−k·half, k·half])."""
    half = math.ceil(15.0 * sigma) + 10
    total = _kfold(_dg_pmf(sigma, half), k)
    target = _dg_pmf(sigma * math.sqrt(k), k * half)
    return 0.5 * float(np.abs(total - target).sum())


# (σ, K) where the bound is below 1 (non-trivial) and the exact TV is far above float64 error.
@pytest.mark.parametrize(
    ("sigma", "k"),
    [(0.5, 2), (0.55, 3), (0.6, 2), (0.6, 6), (0.75, 2), (0.75, 10), (1.0, 2), (1.0, 5), (1.25, 3)],
)
def test_tv_bound_is_at_least_the_exact_tv(sigma: float, k: int) -> None:
    exact = _exact_tv(sigma, k)
    bound = discrete_gaussian_sum_tv_bound(k, sigma)
    assert 0.0 < bound < 1.0
    assert exact <= bound, (exact, bound)
    if sigma <= 0.75:  # the sum is visibly not a discrete Gaussian (Wang & Jia 2020, Lemma 1 is inexact)
        assert exact > 1e-9


def test_tv_bound_formula_and_edges() -> None:
    c = 2.0 * math.pi**2
    # K = 3, σ = 1: 10·(e^{−c/2} + e^{−2c/3}) written out
    want = 10.0 * (math.exp(-c / 2.0) + math.exp(-2.0 * c / 3.0))
    assert discrete_gaussian_sum_tv_bound(3, 1.0) == pytest.approx(want, rel=1e-12)
    assert discrete_gaussian_sum_tv_bound(3, 1.0) >= want
    # beyond the 2^16 exactly summed terms: between the exact sum and 10(K−1)·(largest term)
    k, s = 300_000, 0.9
    log_b = discrete_gaussian_sum_log_tv_bound(k, s)
    terms = np.exp(-c * s * s * np.arange(1, k) / np.arange(2, k + 1))
    assert math.log(10.0 * math.fsum(terms)) <= log_b <= math.log(10.0 * (k - 1)) - c * s * s / 2.0 + 1e-9
    assert discrete_gaussian_sum_log_tv_bound(1, 0.1) == -math.inf  # one party: the same law
    assert discrete_gaussian_sum_log_tv_bound(2, 0.49) == math.inf  # below σ = 1/2: no bound
    # at the simulator's scale the bound is astronomically small, and finite in log space
    assert discrete_gaussian_sum_log_tv_bound(10**6, 3468.0) < -1e8
    with pytest.raises(ParameterError, match="n_terms"):
        discrete_gaussian_sum_log_tv_bound(0, 1.0)
    with pytest.raises(ParameterError, match="sigma"):
        discrete_gaussian_sum_log_tv_bound(2, -1.0)


def test_noise_sum_plan() -> None:
    assert noise_sum_plan("skellam", 0.3, 7, 1024) == [7]  # exact whatever σ
    assert noise_sum_plan("ddg", 0.6, 3, 1024) is None  # τ ≈ 0.07: per party
    assert noise_sum_plan("ddg", 3.0, 5, 1024) == [5]
    assert noise_sum_plan("ddg", 1e5, 300, 1024) == [99, 99, 99, 3]  # σ√g ≤ 1e6: groups of g < 100
    assert noise_sum_plan("ddg", 1.0, 0, 8) == []
    # the budget is over the whole vector: d·τ ≤ 2^-60
    s = 2.3
    log_tau = discrete_gaussian_sum_log_tv_bound(4, s)
    size_ok = math.floor(TV_BUDGET / math.exp(log_tau))
    assert noise_sum_plan("ddg", s, 4, size_ok) == [4]
    assert noise_sum_plan("ddg", s, 4, size_ok + 2) is None
    with pytest.raises(ParameterError, match="mechanism"):
        noise_sum_plan("gauss", 1.0, 2, 4)
    with pytest.raises(ParameterError, match="sigma"):
        noise_sum_plan("ddg", 2e6, 2, 4)


N = 200_000


# The sum law by convolution is the oracle; df and the critical value chi2.isf(1e-6, df) depend only on the
# pmf and N. Cases: one draw of N_Z(0, 5·9) (TV ≈ e^-86 from the true sum), the party-by-party path at σ =
# 0.6 (no bound below 2^-60), one Sk(10) draw for four Sk(2.5) parties.
@pytest.mark.parametrize(
    ("mechanism", "sigma", "k", "seed"),
    [("ddg", 3.0, 5, 601), ("ddg", 0.6, 3, 602), ("skellam", math.sqrt(2.5), 4, 603)],
)
def test_sample_noise_sum_matches_the_law_of_the_sum(mechanism: str, sigma: float, k: int, seed: int) -> None:
    rng = np.random.Generator(np.random.PCG64(seed))
    x = sample_noise_sum(mechanism, sigma, k, N, rng=rng)
    assert x.dtype == np.int64 and x.shape == (N,)
    half = math.ceil(15.0 * sigma) + 10
    if mechanism == "ddg":
        one = _dg_pmf(sigma, half)
    else:
        one = stats.skellam.pmf(np.arange(-half, half + 1), sigma * sigma / 2.0, sigma * sigma / 2.0)
    law = _kfold(one, k)  # on [−k·half, k·half]
    center = k * half

    def pmf(points: np.ndarray) -> np.ndarray:
        return law[np.asarray(points) + center]

    res = chi2_gof(x, pmf, center)
    assert res.df >= 5
    assert res.passed, res


def test_sample_noise_sum_detects_a_wrong_variance() -> None:
    # Power check: 5% too much variance in the 5-party sum of N_Z(0, 9) is rejected at ALPHA.
    rng = np.random.Generator(np.random.PCG64(604))
    x = sample_noise_sum("ddg", 3.0 * math.sqrt(1.05), 5, N, rng=rng)
    law = _kfold(_dg_pmf(3.0, 55), 5)
    res = chi2_gof(x, lambda p: law[np.asarray(p) + 275], 275)
    assert not res.passed


def test_grouped_draws_have_the_sum_variance() -> None:
    # σ = 2e5, K = 30: groups of 24 and 6 (σ√g ≤ 1e6). Skellam is exact; the variance of the sum is Kσ².
    # z-test on the sample variance (Var(s²) ≈ 2·v²/N for this near-normal law; two-sided, ALPHA).
    sigma, k = 2e5, 30
    assert noise_sum_plan("skellam", sigma, k, N) == [24, 6]
    for mech, seed in (("skellam", 605), ("ddg", 606)):
        x = sample_noise_sum(mech, sigma, k, N, rng=np.random.Generator(np.random.PCG64(seed))).astype(np.float64)
        v = k * sigma * sigma
        z = (float(np.mean(x * x)) - v) / (v * math.sqrt(2.0 / N))
        assert abs(z) <= z_two_sided(), (mech, z)
    assert ALPHA == 1e-6
    assert np.array_equal(sample_noise_sum("ddg", 1.0, 0, (2, 3)), np.zeros((2, 3), dtype=np.int64))
