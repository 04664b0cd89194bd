"""Statistical tests of the Skellam sampler against its exact pmf (fixed seeds, false-failure rate 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest
from noise_gof import chi2_gof, z_two_sided

from secagg_dp.noise import sample_skellam, skellam_pmf

N = 1_000_000


def _pcg(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


# Variances sigma^2 for sigma in {0.5, 1, 7.3, 1000}. df and critical value chi2.isf(1e-6, df) are fixed
# by (pmf, N), independent of the seed, and asserted.
@pytest.mark.parametrize(
    ("variance", "half", "min_exp", "seed", "df", "crit"),
    [
        (0.25, 12, 20, 301, 6, 38.26),  # df 6, critical 38.26
        (1.0, 15, 20, 302, 10, 46.86),  # df 10, critical 46.86
        (53.29, 70, 20, 303, 60, 127.1),  # df 60, critical 127.1
        (1e6, 7000, 500, 304, 1541, 1819.4),  # df 1541, critical 1819.4
    ],
)
def test_gof_against_exact_pmf(variance, half, min_exp, seed, df, crit):
    x = sample_skellam(variance, N, rng=_pcg(seed))
    res = chi2_gof(x, lambda k: skellam_pmf(k, variance), half, min_expected=min_exp)
    assert res.df == df and res.critical == pytest.approx(crit, rel=1e-3)
    assert res.passed, res


def test_gof_detects_discrete_gaussian_instead_of_skellam():
    # Power check: at variance 0.25 the discrete Gaussian of the same variance has a visibly different
    # shape (P(0) 0.79 vs 0.78, heavier Skellam tails); 1e6 draws must reject. Critical 38.26 (df 6).
    from secagg_dp.noise import sample_discrete_gaussian

    x = sample_discrete_gaussian(0.5, N, rng=_pcg(305))
    res = chi2_gof(x, lambda k: skellam_pmf(k, 0.25), 12)
    assert not res.passed, res


@pytest.mark.parametrize(("n_clients", "variance", "seed"), [(10, 2.5, 311), (7, 0.3, 312)])
def test_sum_of_skellams_is_skellam(n_clients, variance, seed):
    # Sk(v1) + Sk(v2) = Sk(v1 + v2) (Poisson additivity): the sum over clients must fit Sk(n v).
    # Critical values chi2.isf(1e-6, df): (10, 2.5) -> Sk(25), df 38, 94.59; (7, 0.3) -> Sk(2.1),
    # df 12, 50.83.
    m = 200_000
    x = sample_skellam(variance, (n_clients, m), rng=_pcg(seed)).sum(axis=0)
    total = n_clients * variance
    res = chi2_gof(x, lambda k: skellam_pmf(k, total), 40)
    assert res.df == {25.0: 38, 2.1: 12}[round(total, 6)]
    assert res.passed, res


@pytest.mark.parametrize(("variance", "seed"), [(0.25, 321), (53.29, 322), (1e6, 323), (1e12, 324)])
def test_mean_and_second_moment(variance, seed):
    # Sk(v): mean 0, E x^2 = v, E x^4 = 3 v^2 + v (cumulants: k2 = v, k4 = v). CLT tolerance of
    # z = norm.isf(0.5e-6) = 4.892 standard errors: false-failure rate 1e-6 per check.
    x = sample_skellam(variance, N, rng=_pcg(seed)).astype(np.float64)
    z = z_two_sided()
    m4 = 3 * variance**2 + variance
    assert abs(x.mean()) <= z * np.sqrt(variance / N)
    assert abs(np.mean(x**2) - variance) <= z * np.sqrt((m4 - variance**2) / N)


@pytest.mark.slow
def test_gof_large_sample():
    # 8e6 draws at variance 2: critical chi2.isf(1e-6, 16) = 58.32 (df 16).
    x = sample_skellam(2.0, 8 * N, rng=_pcg(331))
    res = chi2_gof(x, lambda k: skellam_pmf(k, 2.0), 40)
    assert res.df == 16 and res.passed, res


def test_shapes_dtype_reproducible():
    out = sample_skellam(3.0, (4, 5), rng=_pcg(1))
    assert out.shape == (4, 5) and out.dtype == np.int64
    assert sample_skellam(3.0, 0, rng=_pcg(1)).shape == (0,)
    assert np.array_equal(sample_skellam(3.0, 100, rng=_pcg(2)), sample_skellam(3.0, 100, rng=_pcg(2)))
