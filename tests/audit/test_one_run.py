"""The one-run bound (Steinke, Nasr & Jagielski 2023, Theorem 3) against independent oracles."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from secagg_dp.audit import one_run_epsilon_lower, one_run_p_value
from secagg_dp.errors import ParameterError


def test_all_correct_pure_dp_closed_form() -> None:
    # delta = 0, v = r: P[Bin(r, q) >= r] = q^r = 1 - confidence, so q = 0.05^(1/r), eps = log(q / (1 - q))
    for r in (10, 100, 1000):
        q = 0.05 ** (1 / r)
        assert one_run_epsilon_lower(r, r, r, 0.0, 0.95) == pytest.approx(math.log(q / (1 - q)), abs=1e-5)


def test_p_value_matches_an_mpmath_evaluation_of_the_theorem() -> None:
    # the right-hand side of Theorem 3, evaluated term by term with mpmath (40 digits)
    mpmath.mp.dps = 40
    m, r, v, eps, delta = 200, 50, 38, 1.0, 1e-4
    q = mpmath.e**eps / (1 + mpmath.e**eps)
    pmf = [mpmath.binomial(r, i) * q**i * (1 - q) ** (r - i) for i in range(r + 1)]
    tail = mpmath.fsum(pmf[v:])
    alpha = max(mpmath.fsum(pmf[v - i : v]) / i for i in range(1, v + 1))
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(float(tail + 2 * m * delta * alpha), rel=1e-9)


def test_randomized_response_is_not_flagged() -> None:
    # m canaries through eps0-randomized response (exactly eps0-DP per canary): the bound at confidence
    # 1 - 1e-6 exceeds eps0 with probability <= 1e-6 (the theorem); seed fixed
    eps0, m = 1.0, 5000
    rng = np.random.default_rng(4)
    s = np.where(rng.random(m) < 0.5, -1, 1)
    keep = rng.random(m) < math.exp(eps0) / (1 + math.exp(eps0))
    guesses = np.where(keep, s, -s)
    v = int(np.count_nonzero(guesses == s))
    low = one_run_epsilon_lower(m, m, v, 0.0, 1 - 1e-6)
    assert 0.8 < low <= eps0  # measured 0.91 at this seed


def test_delta_only_weakens_the_bound() -> None:
    assert one_run_epsilon_lower(1000, 600, 600, 1e-5) <= one_run_epsilon_lower(1000, 600, 600, 0.0)
    assert one_run_epsilon_lower(100, 100, 50, 1e-5) == 0.0  # chance level proves nothing


def test_bad_inputs() -> None:
    with pytest.raises(ParameterError, match="'v'"):
        one_run_p_value(10, 5, 6, 1.0, 0.0)
    with pytest.raises(ParameterError, match="'r'"):
        one_run_epsilon_lower(10, 11, 0, 0.0)
    with pytest.raises(ParameterError, match="confidence"):
        one_run_epsilon_lower(10, 10, 10, 0.0, 1.5)
