"""Statistical tests of the vectorised discrete Gaussian sampler against the exact pmf.

Every statistical test here has a fixed seed and false-failure rate ALPHA = 1e-6 (asymptotic chi-square
or normal law); the critical values are computed with scipy.stats.chi2.isf / norm.isf and quoted.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from noise_gof import chi2_gof, z_two_sided

import secagg_dp.noise.discrete_gaussian as dg_module
from secagg_dp.noise import discrete_gaussian_pmf, sample_discrete_gaussian

N = 1_000_000

# (sigma, half-width of explicit cells, min expected per cell, seed); df and critical value
# chi2.isf(1e-6, df) are deterministic given (pmf, N) and are checked below so the comment stays true.
GOF_CASES = [
    (0.5, 10, 20, 101, 4, 33.38),  # df 4, critical 33.38
    (1.0, 12, 20, 102, 8, 42.70),  # df 8, critical 42.70
    (7.3, 60, 20, 103, 60, 127.1),  # df 60, critical 127.1
    (1000.0, 7000, 500, 104, 1541, 1819.4),  # df 1541, critical 1819.4
]


def _pcg(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


@pytest.mark.parametrize(("sigma", "half", "min_exp", "seed", "df", "crit"), GOF_CASES)
def test_gof_against_exact_pmf(sigma, half, min_exp, seed, df, crit):
    x = sample_discrete_gaussian(sigma, N, rng=_pcg(seed))
    res = chi2_gof(x, lambda k: discrete_gaussian_pmf(k, sigma), half, min_expected=min_exp)
    assert res.df == df and res.critical == pytest.approx(crit, rel=1e-3)
    assert res.passed, res


@pytest.mark.slow
@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
def test_gof_large_sample_small_sigma(sigma):
    # 8e6 draws: sensitive to pmf deviations of ~1e-3 relative at the centre cells. Critical values
    # chi2.isf(1e-6, df) with df = 4 / 8 / 28 -> 33.38 / 42.70 / 78.82.
    x = sample_discrete_gaussian(sigma, 8 * N, rng=_pcg(200 + int(sigma * 10)))
    res = chi2_gof(x, lambda k: discrete_gaussian_pmf(k, sigma), 40, min_expected=20)
    assert res.df == {0.5: 4, 1.0: 8, 3.0: 28}[sigma]
    assert res.passed, res


def test_gof_detects_rounded_continuous_gaussian():
    # The test must be able to fail: round(N(0, 0.5^2)) differs from N_Z(0, 0.5^2) by ~0.03 in P(0).
    x = np.rint(_pcg(7).normal(0.0, 0.5, N)).astype(np.int64)
    res = chi2_gof(x, lambda k: discrete_gaussian_pmf(k, 0.5), 10)
    assert not res.passed, res


def test_gof_detects_one_percent_wrong_sigma():
    # Noncentrality ~ N * 2 * 0.01^2 = 200 against critical 127.1 (df 60): must reject.
    x = sample_discrete_gaussian(7.3 * 1.01, N, rng=_pcg(8))
    res = chi2_gof(x, lambda k: discrete_gaussian_pmf(k, 7.3), 60)
    assert not res.passed, res


def test_refill_loop_with_small_batches(monkeypatch):
    # Force many accept/refill rounds (batch of 997 proposals) and check the law is unchanged.
    # df 8, critical chi2.isf(1e-6, 8) = 42.70.
    monkeypatch.setattr(dg_module, "_MAX_BATCH", 997)
    x = sample_discrete_gaussian(1.0, 200_000, rng=_pcg(9))
    res = chi2_gof(x, lambda k: discrete_gaussian_pmf(k, 1.0), 12)
    assert res.df == 8 and res.passed, res


@pytest.mark.parametrize(("sigma", "seed"), [(0.5, 11), (7.3, 12), (1000.0, 13), (1e6, 14)])
def test_mean_and_second_moment(sigma, seed):
    # Exact moments of N_Z(0, s^2) from the pmf: V = E x^2, M4 = E x^4 (mean 0 by symmetry).
    # CLT: mean(x) has sd sqrt(V/N), mean(x^2) has sd sqrt((M4 - V^2)/N); two-sided tolerance
    # z = norm.isf(0.5e-6) = 4.892 standard errors gives false-failure rate 1e-6 per check.
    x = sample_discrete_gaussian(sigma, N, rng=_pcg(seed)).astype(np.float64)
    if sigma < 1e5:
        half = int(40 * sigma) + 10
        k = np.arange(-half, half + 1, dtype=np.float64)
        p = discrete_gaussian_pmf(k, sigma)
        v, m4 = float(np.sum(k**2 * p)), float(np.sum(k**4 * p))
    else:
        # For sigma >= 10 the moments equal the continuous ones up to e^{-2 pi^2 sigma^2} (Poisson
        # summation formula); relative terms below 1e-300 here.
        v, m4 = sigma**2, 3 * sigma**4
    z = z_two_sided()
    assert abs(x.mean()) <= z * np.sqrt(v / N)
    assert abs(np.mean(x**2) - v) <= z * np.sqrt((m4 - v * v) / N)


def test_shapes_dtype_and_zero_size():
    rng = _pcg(1)
    assert sample_discrete_gaussian(2.0, 5, rng=rng).shape == (5,)
    out = sample_discrete_gaussian(2.0, (3, 4), rng=rng)
    assert out.shape == (3, 4) and out.dtype == np.int64
    assert sample_discrete_gaussian(2.0, 0, rng=rng).shape == (0,)
    assert sample_discrete_gaussian(2.0, (2, 0, 3), rng=rng).shape == (2, 0, 3)


def test_seeded_generator_is_reproducible():
    a = sample_discrete_gaussian(3.0, 1000, rng=_pcg(5))
    b = sample_discrete_gaussian(3.0, 1000, rng=_pcg(5))
    c = sample_discrete_gaussian(3.0, 1000, rng=_pcg(6))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@settings(max_examples=40, deadline=None)
@given(
    sigma=st.floats(min_value=1e-3, max_value=1e6, allow_nan=False),
    size=st.integers(min_value=0, max_value=300),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_any_sigma_gives_int64_of_requested_size(sigma, size, seed):
    x = sample_discrete_gaussian(sigma, size, rng=_pcg(seed))
    assert x.dtype == np.int64 and x.shape == (size,)
    # P(|x| > 60 sigma + 1) < e^{-1800}: a draw outside is a bug, not bad luck.
    assert np.all(np.abs(x) <= 60 * sigma + 1)


def test_tiny_sigma_is_almost_surely_zero():
    # sigma = 0.01: P(x != 0) = 2 e^{-5000} / Z, i.e. 0 in double precision.
    assert np.all(sample_discrete_gaussian(0.01, 10_000, rng=_pcg(3)) == 0)
