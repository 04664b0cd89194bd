"""Known-answer tests of the pmfs against independent mpmath evaluations and closed-form identities."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg_dp.noise import (
    discrete_gaussian_log_normaliser,
    discrete_gaussian_logpmf,
    discrete_gaussian_pmf,
    skellam_logpmf,
    skellam_pmf,
)

mp.mp.dps = 40


def _mp_dg_logpmf(x: int, sigma: float) -> mp.mpf:
    """Independent reference: log(exp(-x^2/(2 s^2)) / Z) with Z from mpmath.

    Z = theta_3(0, e^{-1/(2 s^2)}) (Jacobi theta, mpmath.jtheta) for s <= 1000; mpmath refuses nomes that
    close to 1, so for s = 1e6 Z comes from mpmath.sumem (Euler-Maclaurin summation of the series).
    """
    s = mp.mpf(sigma)
    if sigma <= 1000:
        z = mp.jtheta(3, 0, mp.exp(-1 / (2 * s**2)))
    else:
        z = 2 * mp.sumem(lambda k: mp.exp(-(k**2) / (2 * s**2)), [0, mp.inf]) - 1
    return -(mp.mpf(x) ** 2) / (2 * s**2) - mp.log(z)


@pytest.mark.parametrize(
    ("sigma", "xs"),
    [
        (0.1, [0, 1, 2, 5]),
        (0.5, [0, 1, 3, 7]),
        (1.0, [0, 1, 4, 30]),
        (7.3, [0, 7, 22, 100]),
        (1000.0, [0, 1000, 3000, 38000]),
        (1e6, [0, 1, 10**6, 3 * 10**6, 38 * 10**6]),
    ],
)
def test_discrete_gaussian_pmf_vs_mpmath(sigma, xs):
    ref = [_mp_dg_logpmf(x, sigma) for x in xs]
    got_log = discrete_gaussian_logpmf(np.array(xs), sigma)
    got = discrete_gaussian_pmf(np.array(xs), sigma)
    for r, gl, g in zip(ref, got_log, got, strict=True):
        # log-pmf to 1e-14 relative (the exponent -x^2/(2 s^2) is itself rounded to ~2e-16 relative).
        assert abs(gl - float(r)) <= 1e-14 * max(1.0, abs(float(r)))
        exact = mp.exp(r)
        if exact > 1e-300:
            # pmf relative error ~ |log pmf| * 2^-52 (exp amplifies the rounding of its argument).
            assert abs(g - float(exact)) <= 1e-13 * max(1.0, abs(float(r))) * float(exact)
        else:
            assert g < 1e-290


@pytest.mark.parametrize("sigma", [0.1, 0.3, 0.5, 0.9999, 1.0, 1.5, 7.3, 100.0, 5000.0])
def test_discrete_gaussian_pmf_sums_to_one(sigma):
    half = int(40 * sigma) + 10  # mass beyond 40 sigma is below e^-800
    total = math.fsum(discrete_gaussian_pmf(np.arange(-half, half + 1), sigma))
    assert total == pytest.approx(1.0, abs=1e-13)


def test_discrete_gaussian_sum_to_one_at_sigma_1e6_in_chunks():
    # 1e6 * 40 * 2 points are too many at once; sum over |x| <= 12 sigma (mass outside < e^-72) in chunks.
    sigma = 1e6
    parts = [
        discrete_gaussian_pmf(np.arange(lo, lo + 2_000_000), sigma).sum()
        for lo in range(-12_000_000, 12_000_000, 2_000_000)
    ]
    total = math.fsum(parts) + discrete_gaussian_pmf(12_000_000, sigma)
    assert total == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("sigma", [0.2, 0.5, 0.9, 1.0, 1.1, 2.0, 4.0])
def test_normaliser_matches_brute_force_on_both_branches(sigma):
    # Brute-force sum (independent of the theta/Poisson form used for sigma >= 1).
    k = np.arange(1, int(60 * sigma) + 3)
    brute = math.log(1 + 2 * math.fsum(np.exp(-(k**2) / (2 * sigma**2))))
    assert discrete_gaussian_log_normaliser(sigma) == pytest.approx(brute, rel=1e-15, abs=1e-15)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 7.3, 1000.0])
def test_discrete_gaussian_variance_below_sigma_squared(sigma):
    # CKS20 show Var[N_Z(0, s^2)] < s^2. The gap is O(s^4 e^{-2 pi^2 s^2}) (Poisson summation):
    # visible in double precision for s <= 1 (~1e-7 relative at s = 1), below rounding for s >= 7.3.
    half = int(40 * sigma) + 10
    k = np.arange(-half, half + 1, dtype=np.float64)
    var = math.fsum(k**2 * discrete_gaussian_pmf(k, sigma))
    if sigma <= 1.0:
        assert 0 < var < sigma**2 * (1 - 1e-8)
    else:
        assert var == pytest.approx(sigma**2, rel=1e-12)


def _mp_sk_logpmf(k: int, v: float) -> mp.mpf:
    """Independent reference: log(e^{-v} I_|k|(v)) with mpmath.besseli."""
    return mp.log(mp.besseli(abs(k), mp.mpf(v))) - v


@pytest.mark.parametrize(
    ("variance", "ks"),
    [
        (0.01, [0, 1, 3, -5]),
        (0.25, [0, 1, -2, 6]),
        (1.0, [0, 1, 5, -20]),
        (53.29, [0, 7, -22, 60]),
        (9999.0, [0, 100, 300, -600]),  # last point below the Debye switch
        (1e4, [0, 100, 300, -600]),  # first point on the Debye branch
        (1e6, [0, 1000, -3000, 6000]),
        (1e9, [0, 31623, -100000]),  # scipy.special.ive is off by ~3e-12 here
        (1e12, [0, 10**6, -3 * 10**6]),  # scipy.special.ive returns NaN here
    ],
)
def test_skellam_pmf_vs_mpmath(variance, ks):
    got = skellam_pmf(np.array(ks), variance)
    got_log = skellam_logpmf(np.array(ks), variance)
    for k, g, gl in zip(ks, got, got_log, strict=True):
        r = _mp_sk_logpmf(k, variance)
        assert abs(gl - float(r)) <= 2e-14 * max(1.0, abs(float(r)))
        assert g == pytest.approx(float(mp.exp(r)), rel=5e-14)


@pytest.mark.parametrize(("variance", "k"), [(1.0, 150), (1.0, 400), (100.0, 500), (0.01, 100), (1e-5, 60)])
def test_skellam_logpmf_in_the_underflow_tail(variance, k):
    # pmf underflows to 0 (below 2.2e-308) here; the log-pmf stays accurate (Debye branch, documented
    # truncation error ~8e-4 k^-5 when v << k, plus rounding 1e-14 relative).
    r = _mp_sk_logpmf(k, variance)
    assert float(mp.exp(r)) < 2.3e-308 and skellam_pmf(k, variance) < 2.3e-308
    assert abs(skellam_logpmf(k, variance) - float(r)) <= 1e-14 * abs(float(r)) + 1e-3 * float(k) ** -5


@pytest.mark.parametrize("variance", [0.01, 0.25, 1.0, 53.29, 9999.0, 1e4, 1e6])
def test_skellam_pmf_sums_to_one(variance):
    half = int(40 * math.sqrt(variance)) + 40
    total = math.fsum(skellam_pmf(np.arange(-half, half + 1), variance))
    assert total == pytest.approx(1.0, abs=1e-13)


@settings(max_examples=60, deadline=None)
@given(
    x=st.integers(min_value=-(10**7), max_value=10**7),
    sigma=st.floats(min_value=0.1, max_value=1e6),
    variance=st.floats(min_value=1e-3, max_value=1e12),
)
def test_pmfs_symmetric_bounded_and_log_consistent(x, sigma, variance):
    for pmf, logpmf, param in (
        (discrete_gaussian_pmf, discrete_gaussian_logpmf, sigma),
        (skellam_pmf, skellam_logpmf, variance),
    ):
        p, pm = pmf(x, param), pmf(-x, param)
        assert p == pm and 0.0 <= p <= 1.0
        lp = logpmf(x, param)
        assert np.isfinite(lp) and lp <= 0.0
        if p > 1e-300:
            assert lp == pytest.approx(math.log(p), rel=1e-12, abs=1e-12)
    # The mode is at 0 for both laws.
    assert discrete_gaussian_pmf(0, sigma) >= discrete_gaussian_pmf(x, sigma)
    assert skellam_pmf(0, variance) >= skellam_pmf(x, variance)


def test_pmf_shapes_and_integer_valued_floats():
    xs = np.arange(-3, 3).reshape(2, 3)
    assert discrete_gaussian_pmf(xs, 1.0).shape == (2, 3)
    assert skellam_logpmf(xs, 1.0).shape == (2, 3)
    assert discrete_gaussian_pmf(2.0, 1.0) == discrete_gaussian_pmf(2, 1.0)
    assert np.ndim(skellam_pmf(2, 1.0)) == 0
