"""The shuffle Gaussian's proven epsilon LOWER bound (sum of one pair's shuffled reports) against oracles."""

from __future__ import annotations

import contextlib
import io
import json
import math

import mpmath
import numpy as np
import pytest

from secagg_dp.accounting.shuffle.lower import gaussian_shift_delta, shuffle_gaussian_epsilon_lower
from secagg_dp.errors import ParameterError
from simulations.cli import main


def _mp_gaussian_epsilon(mu: float, delta: float) -> mpmath.mpf:
    """Exact epsilon of a Gaussian shift mu at delta: mpmath root of Balle & Wang 2018, Thm 8, 50 digits."""
    with mpmath.workdps(50):
        m = mpmath.mpf(mu)

        def gap(e):
            return mpmath.ncdf(m / 2 - e / m) - mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m) - delta

        lo, hi = mpmath.mpf(0), mpmath.mpf(64)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
        return lo


@pytest.mark.parametrize(("sigma", "rounds", "delta"), [(2.0, 3, 1e-5), (0.5, 1, 1e-8), (5.0, 100, 1e-6)])
def test_one_user_is_the_exact_gaussian_epsilon(sigma, rounds, delta):
    # n = 1: shuffling one report is the Gaussian mechanism, so the bound is its exact epsilon (mpmath oracle)
    got = shuffle_gaussian_epsilon_lower(n=1, sigma=sigma, rounds=rounds, delta=delta)
    exact = _mp_gaussian_epsilon(math.sqrt(rounds) / sigma, delta)
    assert got <= exact + 1e-12 and abs(got - float(exact)) < 1e-9


def test_composition_matches_dp_accounting():
    # T-fold composition done numerically by dp-accounting's PLD (pessimistic: at or above the exact value)
    dpa_pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    n, sigma, rounds, delta = 4, 1.5, 7, 1e-6
    ref = dpa_pld.from_gaussian_mechanism(sigma * math.sqrt(n), value_discretization_interval=1e-3)
    ref_eps = ref.self_compose(rounds).get_epsilon_for_delta(delta)
    got = shuffle_gaussian_epsilon_lower(n=n, sigma=sigma, rounds=rounds, delta=delta)
    assert got <= ref_eps and ref_eps - got < 1e-4  # measured 3.4e-6


def test_below_the_exact_privacy_profile_of_the_pair():
    # Brute force: the pair (0, 0) / (1, 0) with n = 2, sigma = 1, T = 1 on a fine 2-D grid. Its hockey-stick
    # divergence at the returned epsilon must be >= delta (else the returned epsilon would exceed the pair's,
    # hence possibly the mechanism's, epsilon). Measured: 4.05e-3 against delta = 1e-3 (dblquad agrees).
    sigma, delta = 1.0, 1e-3
    eps = shuffle_gaussian_epsilon_lower(n=2, sigma=sigma, rounds=1, delta=delta)
    y = np.arange(-8.0, 9.0, 0.01)
    phi0 = np.exp(-(y**2) / (2 * sigma**2)) / math.sqrt(2 * math.pi * sigma**2)
    phi1 = np.exp(-((y - 1) ** 2) / (2 * sigma**2)) / math.sqrt(2 * math.pi * sigma**2)
    p = np.outer(phi0, phi0)
    q = 0.5 * (np.outer(phi1, phi0) + np.outer(phi0, phi1))
    hockey = float(np.maximum(q - math.exp(eps) * p, 0.0).sum() * 0.01**2)
    assert 3.9e-3 < hockey < 4.2e-3
    assert hockey >= delta
    # and the bound is not vacuous here
    assert eps > 1.0


def test_cli_reports_it_labelled_lower_and_below_the_certificate():
    base = ["account", "shuffle-gaussian", "--n", "50", "--sigma", "1", "--rounds", "4", "--delta", "1e-5"]
    docs = []
    for bound in ("lower", "upper"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([*base, "--max-order", "64", "--bound", bound, "--json"]) == 0
        docs.append(json.loads(buf.getvalue()))
    low, up = docs
    assert low["epsilon_lower"] == up["epsilon_lower"]
    lb = low["epsilon_lower"]
    assert lb["bound"] == "lower" and lb["certificate"] is False and lb["delta"] == 1e-5
    expected = shuffle_gaussian_epsilon_lower(n=50, sigma=1.0, rounds=4, delta=1e-5)
    assert lb["epsilon"] == expected and 0 < expected < up["epsilon"]  # below the certified upper bound


def test_bad_input_names_the_parameter():
    with pytest.raises(ParameterError, match="'n'"):
        shuffle_gaussian_epsilon_lower(n=0, sigma=1.0, rounds=1, delta=1e-5)
    with pytest.raises(ParameterError, match="'delta'"):
        shuffle_gaussian_epsilon_lower(n=1, sigma=1.0, rounds=1, delta=1.0)
    with pytest.raises(ParameterError, match="'mu'"):
        gaussian_shift_delta(1.0, 0.0)
    assert shuffle_gaussian_epsilon_lower(n=1, sigma=1e-320, rounds=1, delta=1e-5) == math.inf


def test_tiny_sigma_does_not_overflow():
    # sigma = 1e-10 gives mu = 1e10: near eps = mu^2 / 2 = 5e19 the terms eps and log Phi(b) - log Phi(a) cancel,
    # and rounding at that magnitude once made the exponent positive (expm1 overflowed in the CLI at extremes)
    for eps in (4e19, 5e19, 6e19, 1e20):
        d = gaussian_shift_delta(eps, 1e10)
        assert 0.0 <= d <= 1.0
    lower = shuffle_gaussian_epsilon_lower(n=1, sigma=1e-10, rounds=1, delta=1e-5)
    # the exact epsilon of a shift of 1e10 standard deviations is about mu^2 / 2 = 5e19 (Balle & Wang 2018)
    assert 1e19 < lower <= 5e19 * (1 + 1e-6)
