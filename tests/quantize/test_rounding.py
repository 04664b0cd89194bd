"""Randomized rounding: unbiasedness (statistical), the Δ₂ bound after conditional rounding, Δ₁, errors."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg_dp.errors import ParameterError, RoundingError
from secagg_dp.quantize import (
    ZqCodec,
    conditional_round,
    rounded_l1_bound,
    rounded_l2_bound,
    stochastic_round,
)


def _exact_sq_norms(rows: np.ndarray) -> list[int]:
    return [sum(int(v) * int(v) for v in r) for r in np.atleast_2d(rows).tolist()]


def test_rounded_l2_bound_known_answers() -> None:
    # Hand evaluation of [KLS21] Eq. (2): C = 3, d = 16, β = e^{-0.5} => sqrt(2 ln(1/β)) = 1,
    # bound2² = 9 + 4 + 1·(3 + 2) = 18, bound1 = 3 + 4 = 7, Δ₂ = sqrt(18).
    assert rounded_l2_bound(3.0, 16, math.exp(-0.5)) == pytest.approx(math.sqrt(18.0), rel=1e-15)
    # β = 0: unconditional, Δ₂ = C + √d = 7.
    assert rounded_l2_bound(3.0, 16, 0.0) == 7.0
    # Tiny β: bound2 = sqrt(9 + 4 + sqrt(2·ln 1e300)·5) = sqrt(13 + 5·37.17...) ≈ 14.55 > 7, so Δ₂ = 7.
    assert rounded_l2_bound(3.0, 16, 1e-300) == 7.0
    # Δ₁ = Δ₂·min(√d, Δ₂): 7·min(4, 7) = 28 and 0.5·min(4, 0.5) = 0.25.
    assert rounded_l1_bound(7.0, 16) == 28.0
    assert rounded_l1_bound(0.5, 16) == 0.25
    with pytest.raises(ParameterError):
        rounded_l2_bound(1.0, 4, 1.0)


def test_stochastic_rounding_is_unbiased() -> None:
    # Each coordinate's count of round-ups over N draws is Binomial(N, f) exactly. Two-sided exact binomial
    # test per coordinate at level 1e-6/8 (Bonferroni over 8 coordinates): false-failure rate ≤ 1e-6.
    fracs = np.array([0.0, 1e-3, 0.1, 0.25, 0.5, 0.7, 0.999, 0.3333])
    y = np.array([-3.0, 5.0, -1.0, 2.0, 0.0, -7.0, 11.0, 100.0]) + fracs
    n_draws = 40_000
    draws = stochastic_round(np.broadcast_to(y, (n_draws, y.size)), rng=np.random.default_rng(2024))
    assert draws.dtype == np.int64
    ups = (draws - np.floor(y).astype(np.int64)).sum(axis=0)
    assert set(np.unique(draws - np.floor(y).astype(np.int64))) <= {0, 1}
    assert ups[0] == 0  # integer input is never moved
    for f, k in zip(fracs[1:], ups[1:], strict=True):
        p = scipy.stats.binomtest(int(k), n_draws, float(f)).pvalue
        assert p >= 1e-6 / 8, (f, k)


def test_unbiasedness_test_has_power() -> None:
    # The same statistic rejects round-to-nearest (biased) decisively: guards against a vacuous test.
    n_draws, f = 40_000, 0.3
    k = 0  # round-to-nearest never rounds 0.3 up
    assert scipy.stats.binomtest(k, n_draws, f).pvalue < 1e-6 / 8


@settings(max_examples=60, deadline=None)
@given(
    dim=st.integers(1, 700),
    cs=st.floats(0.0, 1e4),
    beta=st.sampled_from([0.0, 1e-12, 0.01, math.exp(-0.5), 0.9, 0.999]),
    n=st.integers(1, 5),
    seed=st.integers(0, 2**32),
)
def test_l2_bound_holds_after_conditional_rounding(dim: int, cs: float, beta: float, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(n, dim))
    norms = np.linalg.norm(y, axis=1, keepdims=True)
    y = y / norms * cs  # worst case: norm exactly C
    bound = rounded_l2_bound(cs, dim, beta)
    x = conditional_round(y, bound, rng=rng)
    b2 = Fraction(bound) ** 2  # exact: the certificate uses Δ₂ as published (a float)
    assert all(v <= b2 for v in _exact_sq_norms(x))
    assert np.all(np.abs(x - y) < 1.0)


def test_conditional_rounding_actually_conditions() -> None:
    # With β = 0.999 the bound is tight enough that plain rounding exceeds it often (shown first, so the
    # check below can fail), while conditional rounding never does.
    dim = 256
    y = np.full((200, dim), 0.5)
    cs = 8.0  # = ‖y‖₂, the precondition of the bound
    bound = rounded_l2_bound(cs, dim, 0.999)
    plain = stochastic_round(y, rng=np.random.default_rng(1))
    assert np.mean(np.linalg.norm(plain, axis=1) > bound) > 0.3
    cond = conditional_round(y, bound, rng=np.random.default_rng(1))
    assert max(_exact_sq_norms(cond)) <= Fraction(bound) ** 2


def test_rounding_error_after_retry_cap() -> None:
    # Only the all-zero rounding (probability 2^-64) meets the bound: the cap must trigger a RoundingError.
    with pytest.raises(RoundingError, match="max_attempts=5"):
        conditional_round(np.full(64, 0.5), 0.1, rng=np.random.default_rng(0), max_attempts=5)


def test_codec_encoding_respects_sensitivity() -> None:
    codec = ZqCodec(300, 30, 2.0, 37.5, rotation_seed=9)
    x = np.random.default_rng(3).normal(size=(500, 300)) * 5  # all clipped to norm 2
    xq = codec.quantize(x, rng=np.random.default_rng(4))
    assert max(_exact_sq_norms(xq)) <= Fraction(codec.l2_sensitivity) ** 2
    assert np.abs(xq).sum(axis=1).max() <= codec.l1_sensitivity
