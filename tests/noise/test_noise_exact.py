"""Tests of the exact (rational-arithmetic) CKS20 sampler and its sub-procedures.

Fixed seeds; false-failure rate 1e-6 per statistical check (exact binomial p-value, or asymptotic
chi-square with the critical value chi2.isf(1e-6, df) quoted and asserted).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from noise_gof import ALPHA, chi2_gof
from scipy import stats

from secagg_dp.errors import ParameterError
from secagg_dp.noise import (
    bernoulli_exp_exact,
    discrete_gaussian_pmf,
    sample_discrete_gaussian_exact,
    sample_discrete_laplace_exact,
)
from secagg_dp.noise.exact import _UniformSource


def _pcg(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


# sigma given as float / Fraction, or sigma^2 as an exact rational; 20 000 draws each (~1 s).
# Critical values chi2.isf(1e-6, df): df 2 -> 27.63, df 10 -> 46.86, df 4 -> 33.38.
@pytest.mark.parametrize(
    ("kwargs", "sigma_float", "seed", "df"),
    [
        ({"sigma": 0.5}, 0.5, 401, 2),
        ({"sigma": Fraction(3, 2)}, 1.5, 402, 10),
        ({"sigma": None, "sigma_squared": Fraction(2, 3)}, math.sqrt(2 / 3), 403, 4),
    ],
)
def test_exact_sampler_gof_against_pmf(kwargs, sigma_float, seed, df):
    sigma = kwargs.pop("sigma")
    x = sample_discrete_gaussian_exact(sigma, 20_000, rng=_pcg(seed), **kwargs)
    assert x.dtype == np.int64 and x.shape == (20_000,)
    res = chi2_gof(x, lambda k: discrete_gaussian_pmf(k, sigma_float), 20)
    assert res.df == df and res.passed, res


@pytest.mark.slow
def test_exact_sampler_gof_large_sigma():
    # sigma = 1000 exercises big-integer thresholds (den ~ 2^73 > 2^64). df 193, critical 301.17.
    x = sample_discrete_gaussian_exact(1000.0, 20_000, rng=_pcg(404))
    res = chi2_gof(x, lambda k: discrete_gaussian_pmf(k, 1000.0), 7000, min_expected=100)
    assert res.df == 193 and res.passed, res


@pytest.mark.parametrize(
    ("gamma", "seed"), [(0, 1), (Fraction(1, 2), 2), (1, 3), (Fraction(5, 2), 4), (Fraction(1, 7), 5)]
)
def test_bernoulli_exp_frequency(gamma, seed):
    # Exact binomial two-sided p-value of the success count must exceed 1e-6.
    rng = _pcg(400 + seed)
    m = 10_000
    hits = sum(bernoulli_exp_exact(gamma, rng) for _ in range(m))
    p = math.exp(-float(gamma))
    if p == 1.0:
        assert hits == m
    else:
        assert stats.binomtest(hits, m, p).pvalue > ALPHA


@pytest.mark.parametrize(("t", "seed", "df"), [(1, 11, 12), (3, 12, 34)])
def test_discrete_laplace_gof(t, seed, df):
    # Lap_Z(t): P(y) = (1 - q) / (1 + q) q^|y|, q = e^{-1/t} (CKS20 Def. 2). Critical values
    # chi2.isf(1e-6, df): df 12 -> 50.83, df 34 -> 88.38 (computed by the helper, df asserted).
    rng = _pcg(seed)
    x = np.array([sample_discrete_laplace_exact(t, rng) for _ in range(20_000)])
    q = math.exp(-1 / t)

    def pmf(k):
        return (1 - q) / (1 + q) * q ** np.abs(k)

    res = chi2_gof(x, pmf, 60)
    assert res.df == df and res.passed, res


@pytest.mark.parametrize("n", [1, 2, 3, 7, 2**63 - 1, 2**63, 2**63 + 1, 2**64, 2**64 + 3, 3 * 2**100])
def test_uniform_source_range_and_spread(n):
    # Exhaustive-ish: values stay in [0, n); for n >= 4, 4000 draws all below n/4 would have
    # probability 4^-4000 (a stuck or truncated generator).
    src = _UniformSource(_pcg(n % 1000))
    xs = [src.below(n) for _ in range(4000)]
    assert all(0 <= x < n for x in xs)
    if n >= 4:
        assert max(xs) >= n // 4
    if n == 2:
        # Exact binomial check of fairness of a single bit.
        assert stats.binomtest(sum(xs), 4000, 0.5).pvalue > ALPHA


def test_uniform_source_small_range_is_uniform():
    # n = 6 (not a power of two: exercises rejection). df 5, critical chi2.isf(1e-6, 5) = 35.89.
    src = _UniformSource(_pcg(21))
    counts = np.bincount([src.below(6) for _ in range(60_000)], minlength=6)
    stat = float(np.sum((counts - 10_000) ** 2 / 10_000))
    assert stat < stats.chi2.isf(ALPHA, 5) == pytest.approx(35.89, abs=0.01)


def test_seeded_reproducible():
    a = sample_discrete_gaussian_exact(2.0, 50, rng=_pcg(9))
    b = sample_discrete_gaussian_exact(2.0, 50, rng=_pcg(9))
    assert np.array_equal(a, b)
    assert sample_discrete_gaussian_exact(2.0, (2, 3), rng=_pcg(9)).shape == (2, 3)
    assert sample_discrete_gaussian_exact(1e6, 3, rng=_pcg(9)).dtype == np.int64


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((None, 3), {}),
        ((1.0, 3), {"sigma_squared": 1}),
        ((0, 3), {}),
        ((-1.0, 3), {}),
        ((float("nan"), 3), {}),
        ((float("inf"), 3), {}),
        ((1e6 + 1, 3), {}),
        ((Fraction(-1, 2), 3), {}),
        (("1", 3), {}),
        ((True, 3), {}),
        ((None, 3), {"sigma_squared": 0.5}),  # a float sigma^2 is refused: pass a Fraction
        ((None, 3), {"sigma_squared": Fraction(10**12 + 1)}),
        ((1.0, -1), {}),
        ((1.0, 2.5), {}),
    ],
)
def test_exact_invalid_parameters(args, kwargs):
    with pytest.raises(ParameterError, match="sigma|size"):
        sample_discrete_gaussian_exact(*args, rng=_pcg(0), **kwargs)


def test_exact_helpers_invalid():
    with pytest.raises(ParameterError, match="gamma"):
        bernoulli_exp_exact(Fraction(-1, 3), _pcg(0))
    with pytest.raises(ParameterError, match="'t'"):
        sample_discrete_laplace_exact(0, _pcg(0))
    with pytest.raises(TypeError, match="rng"):
        sample_discrete_gaussian_exact(1.0, 2, rng=123)
