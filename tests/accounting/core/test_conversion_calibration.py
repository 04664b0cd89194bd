"""RDP<->DP conversion edge cases (oracle: dp-accounting), DP->RDP, calibration."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dpa
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg_dp.accounting import (
    DEFAULT_ORDERS,
    LargestOrderWarning,
    calibrate_gaussian_noise_multiplier,
    calibrate_noise,
    dp_delta,
    dp_to_rdp,
    dp_to_rdp_lemma1,
    gaussian_epsilon,
    pure_dp_to_rdp,
    rdp_to_dp,
)
from secagg_dp.errors import ParameterError

ORD = DEFAULT_ORDERS


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(rho=st.floats(1e-4, 10.0), delta=st.floats(1e-12, 0.5))
def test_epsilon_and_delta_match_dp_accounting(rho, delta):
    # zCDP-shaped curves r(alpha) = rho*alpha; orders up to 256 so the optimum is interior mostly
    o = np.arange(2, 257, dtype=np.float64)
    r = rho * o
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LargestOrderWarning)
        e, a = rdp_to_dp(o, r, delta)
    e_ref, a_ref = dpa.compute_epsilon(o, r, delta)
    assert e == pytest.approx(e_ref, rel=1e-9, abs=1e-12)
    d, _ = dp_delta(o, r, max(e, 0.01))
    d_ref, _ = dpa.compute_delta(o, r, max(e, 0.01))
    assert d == pytest.approx(d_ref, rel=1e-9, abs=1e-300)
    if e > 0.01:
        assert d <= delta * (1 + 1e-9)  # round trip: the delta at the certified epsilon is <= the target


def test_edge_cases():
    o = np.array([2.0, 4.0, 8.0])
    r = np.array([0.1, 0.2, 0.4])
    assert rdp_to_dp(o, r, 1.0) == (0.0, 2.0)  # delta >= 1: anything goes
    assert rdp_to_dp(o, r, 2.0)[0] == 0.0
    assert rdp_to_dp(o, r, 0.0)[0] == math.inf  # delta = 0 needs order inf
    assert rdp_to_dp(o, np.zeros(3), 0.0)[0] == 0.0
    with pytest.raises(ParameterError, match="rdp"):
        rdp_to_dp(o, np.array([0.1, -1e-3, 0.2]), 1e-5)  # negative divergence: refuse, never certify 0
    with pytest.raises(ParameterError, match="NaN"):
        rdp_to_dp(o, np.array([0.1, np.nan, 0.2]), 1e-5)
    with pytest.raises(ParameterError, match="delta"):
        rdp_to_dp(o, r, -1e-5)
    with pytest.raises(ParameterError, match="orders"):
        rdp_to_dp(np.array([1.0, 2.0, 3.0]), r, 1e-5)
    # tiny divergence: KL bound gives epsilon 0 (delta^2 >= 1 - e^{-r})
    assert rdp_to_dp(o, np.full(3, 1e-12), 1e-5)[0] == 0.0
    # orders near 1: finite, no NaN
    near = np.array([1.0 + 1e-12, 1.001, 1.5])
    e, _ = rdp_to_dp(near, 0.01 * near, 1e-5, warn=False)
    assert math.isfinite(e) and e > 0
    # infinite RDP at some orders is fine
    assert math.isfinite(rdp_to_dp(o, np.array([0.1, np.inf, np.inf]), 1e-5)[0])


def test_warns_when_largest_order_is_optimal():
    o = np.array([2.0, 3.0, 4.0])
    with pytest.warns(LargestOrderWarning, match="largest"):
        rdp_to_dp(o, 1e-4 * o, 1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rdp_to_dp(ORD, 0.5 * ORD, 1e-5)  # interior optimum: silent
    assert issubclass(LargestOrderWarning, UserWarning)


def test_pure_dp_to_rdp_is_randomized_response():
    # exact Rényi divergence of the randomized-response pair, computed directly
    eps = 1.3
    p = math.exp(eps) / (1 + math.exp(eps))
    for a in (1.5, 2.0, 7.0, 100.0):
        exact = math.log(p**a * (1 - p) ** (1 - a) + (1 - p) ** a * p ** (1 - a)) / (a - 1)
        assert pure_dp_to_rdp(eps, [a])[0] == pytest.approx(min(exact, eps), rel=1e-12)
    assert np.all(pure_dp_to_rdp(eps, ORD) <= eps)
    assert np.array_equal(dp_to_rdp(eps, 0.0, ORD), pure_dp_to_rdp(eps, ORD))
    with pytest.raises(ParameterError, match="delta"):
        dp_to_rdp(eps, 1e-6, ORD)


def test_seed_lemma1_is_not_a_certificate():
    # seed 001 Lemma 1 as printed, at delta = 0, eps = 1, alpha = 2, is below the exact RR divergence 0.735:
    # it cannot be an upper bound. We keep it only labelled as such.
    rr = pure_dp_to_rdp(1.0, [2.0])[0]
    assert rr == pytest.approx(0.7353256, rel=1e-6)
    assert dp_to_rdp_lemma1(1.0, 0.0, [2.0])[0] < rr - 0.5


def test_calibrate_gaussian_is_smallest_and_meets_target():
    kw = dict(delta=1e-5, rounds=100, sample_rate=0.01)
    z, eps = calibrate_gaussian_noise_multiplier(1.0, **kw)
    assert eps <= 1.0
    assert gaussian_epsilon(z * (1 - 1e-5), warn=False, **kw)[0] > 1.0
    # dp-accounting oracle at the calibrated z
    acc_rdp = 100 * dpa._compute_rdp_poisson_subsampled_gaussian(0.01, z, ORD)
    # dp-accounting's fractional-order series is slightly looser than ours (see test_core_oracles)
    ref = dpa.compute_epsilon(ORD, acc_rdp, 1e-5)[0]
    assert ref == pytest.approx(eps, rel=1e-7) and eps <= ref * (1 + 1e-12)


def test_calibrate_unreachable_raises_clear_error():
    with pytest.raises(ParameterError, match="unreachable"):
        calibrate_noise(lambda x: 5.0, 1.0)


def test_replace_one_uses_double_sensitivity():
    # the user passes z = sigma/C; under replace-one the accountant uses 2C: same as add-remove at z/2
    e1 = gaussian_epsilon(2.0, delta=1e-5, neighbouring="replace-one", warn=False)[0]
    e2 = gaussian_epsilon(1.0, delta=1e-5, neighbouring="add-remove", warn=False)[0]
    assert e1 == pytest.approx(e2, rel=1e-12)
    with pytest.raises(ParameterError, match="neighbouring"):
        gaussian_epsilon(1.0, delta=1e-5, neighbouring="replace-one", sample_rate=0.1, sampling="poisson")
