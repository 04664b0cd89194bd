"""The fast revealed-dropout sum (add-then-remove enforcement, server and coalition views) against an independent
slow path: every d = 0..n - k summed term by term, with the Binomial log-pmf in mpmath and the Skellam bound of Agarwal,
Kairouz & Liu (2021, Thm 3.5) written out here (not the library's skellam_rdp), the enforced variance V(k, d) of
Jiang, Wang & Chen (2024) as docs/noise-enforcement.md states it, and the coalition's k_eff(k_lo) mu / (k_hi + d + c)
(docs/accounting/observers.md). Also: the check-in mixture evaluates the base at the requested orders only,
against the base evaluated at every integer order and then selected."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from secagg_dp.accounting.checkin.coalition import Coalition, CoalitionEnforcedSkellamSum
from secagg_dp.accounting.checkin.enforced import EnforcedSkellamSum, revealed_mixture_rdp
from secagg_dp.accounting.checkin.mixture import SubsampledCheckin, checkin_orders

ORDERS = np.arange(2, 257, dtype=np.float64)  # the simulator's grid: every integer 2..256


def _skellam_eps(a: np.ndarray, var: np.ndarray, l2: float, l1: float) -> np.ndarray:
    """AKL21 Thm 3.5 (as in their accounting code): a l2^2 / (2 mu) + min(((2a - 1) l2^2 + 6 l1) / (4 mu^2),
    3 l1 / (2 mu)); rows: variances, columns: orders."""
    mu = np.asarray(var, dtype=np.float64)[:, None]
    return a * l2 * l2 / (2 * mu) + np.minimum(((2 * a - 1) * l2 * l2 + 6 * l1) / (4 * mu * mu), 1.5 * l1 / mu)


@functools.lru_cache(maxsize=64)
def _log_pmf(trials: int, rho: float) -> np.ndarray:
    """log P(d), d ~ Bin(trials, rho), d = 0..trials, in mpmath (40 digits; scipy's log-pmf is off by ~2e-13)."""
    import mpmath as mp

    mp.mp.dps = 40
    lf = [mp.mpf(0)]
    for j in range(1, trials + 1):
        lf.append(lf[-1] + mp.log(j))
    lr, lq = mp.log(mp.mpf(rho)), mp.log1p(-mp.mpf(rho))
    return np.array(
        [float(lf[trials] - lf[d] - lf[trials - d] + d * lr + (trials - d) * lq) for d in range(trials + 1)]
    )


def _slow(a: np.ndarray, trials: int, rho: float, var: np.ndarray, l2: float, l1: float) -> np.ndarray:
    """1/(a-1) log sum_{d=0}^{trials} P(d) exp((a-1) eps(a; var[d])), every d, exact log-pmf."""
    logw = _log_pmf(trials, rho)
    terms = logw[:, None] + (a - 1) * _skellam_eps(a, var, l2, l1)
    return np.maximum(logsumexp(terms, axis=0) / (a - 1), 0.0)


def _mech(n: int, roster_rate: float, sum_rate: float, tolerance: float = 0.1) -> EnforcedSkellamSum:
    # sensitivities and target variance of the dropouts study's scale (n = 1000, z = 4, d = 256) and smaller ones
    return EnforcedSkellamSum(9.2e8 * n / 1000, 15155.0, 242480.0, n, tolerance, roster_rate, sum_rate)


def _close(got: np.ndarray, want: np.ndarray, rel: float = 1e-12) -> None:
    assert got.shape == want.shape
    assert np.all(got >= want * (1 - rel) - 1e-300), np.max((want - got) / want)  # never below the exact sum
    assert np.all(got <= want * (1 + rel) + 1e-300), np.max((got - want) / want)


@pytest.mark.parametrize(
    ("n", "roster_rate", "sum_rate"),
    [(60, 0.475, 0.4287), (300, 0.09, 0.0729), (1000, 0.095, 0.0857), (1000, 0.05, 0.00625)],
)
def test_enforced_base_equals_the_slow_sum_over_every_dropout_count(n, roster_rate, sum_rate):
    mech = _mech(n, roster_rate, sum_rate)
    rho = mech.dropout_rate
    ks = sorted({1, 2, 7, n // 10, n // 3, n - 5, n})
    got = mech.rdp_upper(np.array(ks, dtype=float), np.array(ks, dtype=float), ORDERS)
    for row, k in zip(got, ks, strict=True):
        d = np.arange(n - k + 1)
        top = np.floor(0.1 * (k + d))  # D(N) = floor(tau N), tau = 0.1 (exact here: 0.1 * N is never near an integer)
        var = np.where(d <= top, mech.target_variance, k * mech.target_variance / np.maximum(k + d - top, 1))
        _close(row, _slow(ORDERS, n - k, rho, var, mech.l2_sensitivity, mech.l1_sensitivity))


@pytest.mark.parametrize(("colluders", "min_sum"), [(0, 1), (0, 12), (2, 12), (3, 1)])
@pytest.mark.parametrize(("n", "roster_rate", "sum_rate"), [(60, 0.475, 0.4287), (1000, 0.095, 0.0857)])
def test_coalition_enforced_block_equals_the_slow_sum(n, roster_rate, sum_rate, colluders, min_sum):
    mech = _mech(n, roster_rate, sum_rate)
    coal = CoalitionEnforcedSkellamSum(mech, Coalition(colluders, min_sum))
    blocks = [(1, 1), (3, 9), (min_sum, min_sum), (n // 10, n // 10 + 4), (n // 2, n), (n - 1, n - 1), (n, n)]
    lo = np.array([b[0] for b in blocks], dtype=float)
    hi = np.array([b[1] for b in blocks], dtype=float)
    got = coal.rdp_upper(lo, hi, ORDERS)
    for row, (k_lo, k_hi) in zip(got, blocks, strict=True):
        k_eff = max(1, min(k_lo, min_sum) - colluders)
        d = np.arange(n - k_hi + 1)
        var = k_eff * mech.target_variance / (k_hi + d + colluders)
        _close(row, _slow(ORDERS, n - k_hi, mech.dropout_rate, var, mech.l2_sensitivity, mech.l1_sensitivity))


def test_coalition_block_without_dropouts_is_the_skellam_bound_at_the_roster():
    mech = _mech(40, 0.3, 0.3)  # roster rate = sum rate: rho = 0, d = 0
    coal = CoalitionEnforcedSkellamSum(mech, Coalition(1, 5))
    got = coal.rdp_upper(np.array([7.0]), np.array([9.0]), ORDERS)[0]
    want = _skellam_eps(ORDERS, np.array([4 * mech.target_variance / 10]), 15155.0, 242480.0)[0]
    _close(got, want)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 700),
    cols=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
    spread=st.sampled_from([1.0, 50.0, 1e4, 1e7]),
)
def test_pruned_mixture_is_an_upper_bound_equal_to_the_exact_sum(rows, cols, seed, spread):
    """Random weights (some zero) and cumulants non-decreasing down the rows, over ranges from 1 to 1e7 nats:
    the pruned sum is never below the exact log-sum-exp and within 1e-12 relative of it."""
    rng = np.random.default_rng(seed)
    a = np.sort(rng.choice(np.arange(2, 300), size=cols, replace=False)).astype(np.float64)
    logw = rng.normal(0, 30, rows) - rng.exponential(200, rows)
    logw[rng.random(rows) < 0.05] = -np.inf
    if np.all(np.isneginf(logw)):
        logw[0] = 0.0
    g = np.cumsum(rng.exponential(spread / rows, (rows, cols)), axis=0) * (a - 1)[None, :] / 300
    got = revealed_mixture_rdp(a, logw, lambda r, c: g[np.ix_(r, c)])
    want = np.maximum(logsumexp(logw[:, None] + g, axis=0) / (a - 1), 0.0)
    _close(got, want)


@pytest.mark.parametrize("amplification", ["joint-convexity", "none"])
def test_mixture_evaluates_the_base_at_the_requested_orders_only(amplification):
    """Old path, by hand: the base at every integer 2..max order, then the requested columns; the provider's
    per-k terms are log(q) + log(expm1((a-1) eps)) capped by log(expm1((a-1) eps)) (joint convexity)."""
    mech = CoalitionEnforcedSkellamSum(_mech(200, 0.095, 0.0857), Coalition(1, 6))
    orders = checkin_orders(1024)  # 2..256, then every 16th to 1024: sparse above 256
    prov = SubsampledCheckin(mech, 200, amplification=amplification)
    k = np.array([3.0, 17.0, 40.0])
    got = prov.log_expm1_upper(k, k, orders)
    every = np.arange(2, int(orders.max()) + 1)
    base = mech.rdp_upper(k, k, every)[:, orders - 2]
    x = (orders - 1.0)[None, :] * base
    cap = x + np.log(-np.expm1(-x))  # log(e^x - 1), stable for large x
    want = cap if amplification == "none" else np.minimum(np.log(k / 200)[:, None] + cap, cap)
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(got))
    assert np.allclose(got[finite], want[finite], rtol=1e-12, atol=0)
    assert math.isfinite(float(got[0, 0]))
