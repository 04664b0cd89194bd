"""Subsampled shuffle Gaussian and shuffled check-in Gaussian RDP (LT22 Thms 2, 3; LHT22 Thm 2, 5).

Replace-one neighbours throughout. Which results are what:

* ``pair_lower`` (ours, rigorous LOWER bound): the exact Rényi moment of the pair D = (0,…,0), D' = (1,0,…,0)
  under check-in: Σ_k Bin(k; n, γ) Σ_j C(λ,j)(1−k/n)^{λ−j}(k/n)^j e^{(j−1)D^SG_j(k)}, D^SG the shuffle
  Gaussian divergence of :mod:`shuffle_gaussian`. Never a certificate.
* ``windowed`` with ``base="shuffle-lower"``: LHT22 Thm 2 (rate k/n) with the WBK subsampling bound fed
  by the shuffle Gaussian LOWER bound (LT22 Eq. 16–17). Neither a certificate nor a proven lower bound:
  an optimistic estimate, as LHT22 Sec. 5 says. Reported as ``bound="estimate"``, certificate false
  (command line and :data:`~secagg_dp.accounting.shuffle.certificates.SHUFFLE_BOUNDS`).
* ``windowed`` with ``base="gaussian-upper"``: the same sum with the Gaussian RDP jc (LT22 Corollary 1)
  as base — a valid UPPER bound (certificate), the check-in amplification without shuffling gains.
* ``chernoff``: LT22 Thm 3 as printed; rests on Conjecture 1 (monotonicity in n) and uses rate γ in
  place of k/n (LHT22 Thm 2 has k/n), and feeds the WBK upper bound with the shuffle Gaussian lower bound;
  reported as ``bound="estimate"``, never a certificate.

The windowed sums cover k in a window holding all but ``tail`` of the Binomial(n, γ) mass and bound the rest
by tail-mass × (largest term), so the reported value is an upper bound on the full sum over k.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, logsumexp

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.tails import log_binom_pmf, log_binom_tail_ub
from secagg_dp.accounting.core.logspace import log1p_exp
from secagg_dp.accounting.core.subsampling import wor_subsampled_log_am1
from secagg_dp.accounting.shuffle.gaussian import _check_orders, shuffle_gaussian_log_moments
from secagg_dp.errors import ParameterError

__all__ = [
    "NEIGHBOURING",
    "subsampled_shuffle_gaussian_rdp",
    "shuffled_checkin_gaussian_rdp_chernoff",
    "shuffled_checkin_gaussian_rdp_windowed",
    "shuffled_checkin_gaussian_rdp_pair_lower",
    "binomial_window",
]


def _binom() -> Any:
    """scipy.stats.binom, imported on first use (scipy.stats costs about a second to import)."""
    from scipy.stats import binom

    return binom


NEIGHBOURING = "replace-one"


def _sg_rdp_table(L: int, k: int, sigma: float) -> np.ndarray:
    """ε^SG_k(j) at j = 0..L (entries 0, 1 unused): shuffle Gaussian LOWER bound with k shuffled reports."""
    lm = shuffle_gaussian_log_moments(L, n=k, sigma=sigma)
    out = np.zeros(L + 1)
    out[2:] = lm[2:] / (np.arange(2, L + 1) - 1.0)
    return out


def _wbk_log_moments(table: np.ndarray, rate: float | np.ndarray, orders: np.ndarray) -> np.ndarray:
    """log A(λ) of WBK19 Thm 9 (the core's :func:`wor_subsampled_log_am1`), uncapped as in LT22 Eq. 16."""
    return log1p_exp(wor_subsampled_log_am1(table, rate, orders))


def subsampled_shuffle_gaussian_rdp(
    orders: int | Sequence[int] | npt.NDArray[np.int64], *, m: int, n: int, sigma: float
) -> np.ndarray:
    """LT22 Thm 2 (= LHT22 Thm 5): m of n users sampled without replacement, then shuffle Gaussian.

    WBK subsampling bound at rate m/n applied to the shuffle Gaussian LOWER bound ε^SG_m: an optimistic
    estimate, not a certificate (module docstring).
    """
    arr = _check_orders(orders)
    n = check_int("n", n, lo=1)
    m = check_int("m", m, lo=1, hi=n)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    L = int(arr.max())
    return _wbk_log_moments(_sg_rdp_table(L, m, sigma), m / n, arr) / (arr - 1.0)


def binomial_window(n: int, gamma: float, tail: float) -> tuple[int, int, float]:
    """[lo, hi] holding all but at most ``tail`` of Binomial(n, γ); returns (lo, hi, exact outside mass)."""
    lo = int(_binom().ppf(tail / 2.0, n, gamma))
    hi = int(_binom().isf(tail / 2.0, n, gamma))
    lo, hi = max(lo, 0), min(hi, n)
    outside = float(_binom().cdf(lo - 1, n, gamma) + _binom().sf(hi, n, gamma)) if lo > 0 or hi < n else 0.0
    return lo, hi, outside


def _log_binom_pmf(k: np.ndarray, n: int, gamma: float) -> npt.NDArray[np.float64]:
    result: npt.NDArray[np.float64] = _binom().logpmf(k, n, gamma)
    return result


def _checkin_setup(
    orders: int | Sequence[int] | npt.NDArray[np.int64], n: int, gamma: float, sigma: float, tail: float
) -> tuple[np.ndarray, int, float, float, float]:
    arr = _check_orders(orders)
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma, allow_zero=False)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    tail = check_real("tail", tail, lo=0.0, hi=1e-3, lo_open=True)
    return arr, n, gamma, sigma, tail


def _log_moment_rows(ks: np.ndarray, n: int, L: int, base_rows: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """log A_k(λ) (WBK Thm 9 at rate k/n, via the check-in kernel) for rows k ≥ 1; shape (K, len(orders))."""
    return _wbk_log_moments(base_rows, ks / n, orders)


def shuffled_checkin_gaussian_rdp_windowed(
    orders: int | Sequence[int] | npt.NDArray[np.int64],
    *,
    n: int,
    gamma: float,
    sigma: float,
    base: str = "shuffle-lower",
    tail: float = 1e-12,
) -> npt.NDArray[np.float64]:
    """LHT22 Thm 2: (1/(λ−1))·log Σ_k Bin(k; n, γ)·A_k(λ), A_k = WBK Thm 9 moment at rate k/n.

    ``base="shuffle-lower"``: base RDP ε^SG_k from the shuffle Gaussian lower bound — optimistic estimate,
    NOT a certificate. ``base="gaussian-upper"``: base RDP jc (LT22 Cor. 1) — an UPPER bound.
    k = 0 contributes moment 1. Outside the window, blocks of k are bounded rigorously by the binomial tail
    bound of the check-in kernel times the Gaussian-base moment at the block's largest k (non-decreasing
    in k), so the result upper-bounds the full sum over k for the chosen base. Cost O(window · L²).
    """
    arr, n, gamma, sigma, tail = _checkin_setup(orders, n, gamma, sigma, tail)
    if base not in ("shuffle-lower", "gaussian-upper"):
        raise ParameterError(f"Argument 'base' must be 'shuffle-lower' or 'gaussian-upper', not {base!r}.")
    L = int(arr.max())
    lam = np.arange(2, L + 1)
    jj = np.arange(L + 1, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # (1/σ)²: σ² would underflow for σ < 1e-154
        gauss_row = np.where(jj >= 2, jj * ((1.0 / np.float64(sigma)) ** 2 / 2.0), 0.0)  # j < 2 unused
    lo, hi, _ = binomial_window(n, gamma, tail)
    ks = np.arange(max(lo, 1), hi + 1)
    if base == "gaussian-upper":
        rows = np.broadcast_to(gauss_row, (ks.size, L + 1))
    else:
        rows = np.zeros((ks.size, L + 1))
        for i, k in enumerate(ks):
            lm = shuffle_gaussian_log_moments(L, n=int(k), sigma=sigma)
            rows[i, 2:] = lm[2:] / (jj[2:] - 1.0)
    log_sum = logsumexp(log_binom_pmf(n, ks, gamma)[:, None] + _log_moment_rows(ks, n, L, rows, lam), axis=0)
    if lo == 0:
        log_sum = np.logaddexp(log_sum, float(log_binom_pmf(n, np.array([0]), gamma)[0]))
    # rigorous tail blocks: below the window [1, lo−1], above it [hi+1, 2hi+1], … up to n
    blocks = []
    if lo > 1:
        blocks.append((1, lo - 1))
    a = hi + 1
    while a <= n:
        b = min(n, 2 * a)
        blocks.append((a, b))
        a = b + 1
    if blocks:
        ba = np.array([blk[0] for blk in blocks], dtype=np.float64)
        bb = np.array([blk[1] for blk in blocks], dtype=np.float64)
        log_mass = log_binom_tail_ub(n, ba, bb, gamma)
        worst = _log_moment_rows(bb, n, L, np.broadcast_to(gauss_row, (bb.size, L + 1)), lam)
        log_sum = np.logaddexp(log_sum, logsumexp(log_mass[:, None] + worst, axis=0))
    result: npt.NDArray[np.float64] = np.maximum(log_sum[arr - 2], 0.0) / (arr - 1.0)
    return result


def shuffled_checkin_gaussian_rdp_pair_lower(
    orders: int | Sequence[int] | npt.NDArray[np.int64], *, n: int, gamma: float, sigma: float, tail: float = 1e-12
) -> npt.NDArray[np.float64]:
    """Rigorous LOWER bound: exact moment of the pair (0,…,0) vs (1,0,…,0) under shuffled check-in (ours).

    Given k check-ins the differing user is among them with probability k/n, so the λ-th moment is
    Σ_j C(λ,j)(1−k/n)^{λ−j}(k/n)^j e^{(j−1)D^SG_j(k)}; k outside the window is dropped (terms are ≥ 0, so the
    result stays a lower bound). Not a certificate.
    """
    arr, n, gamma, sigma, tail = _checkin_setup(orders, n, gamma, sigma, tail)
    L = int(arr.max())
    lo, hi, _ = binomial_window(n, gamma, tail)
    ks = np.arange(max(lo, 1), hi + 1)
    lam = np.arange(2, L + 1, dtype=np.float64)
    jj = np.arange(0, L + 1, dtype=np.float64)
    acc = np.full(L - 1, -np.inf)
    if lo == 0:
        acc = np.full(L - 1, float(_log_binom_pmf(np.array([0]), n, gamma)[0]))
    if ks.size:
        LM = np.stack([shuffle_gaussian_log_moments(L, n=int(k), sigma=sigma) for k in ks])  # (K, L+1)
        r = ks / n
        log_r = np.log(r)[:, None]
        with np.errstate(divide="ignore"):
            log_1r = np.log1p(-r)[:, None]
        lw = log_binom_pmf(n, ks, gamma)
        for i, lamv in enumerate(lam):
            li = int(lamv)
            J = jj[: li + 1]
            rest = li - J
            with np.errstate(invalid="ignore"):
                t = (
                    (gammaln(lamv + 1) - gammaln(J + 1) - gammaln(rest + 1))[None, :]
                    + J[None, :] * log_r
                    + np.where(rest[None, :] > 0, rest[None, :] * log_1r, 0.0)
                    + LM[:, : li + 1]
                )
            acc[i] = np.logaddexp(acc[i], logsumexp(lw + logsumexp(t, axis=1)))
    result: npt.NDArray[np.float64] = np.maximum(acc[arr - 2], 0.0) / (arr - 1.0)
    return result


def shuffled_checkin_gaussian_rdp_chernoff(
    orders: int | Sequence[int] | npt.NDArray[np.int64],
    *,
    n: int,
    gamma: float,
    sigma: float,
    deltas: Sequence[float] | None = None,
) -> npt.NDArray[np.float64]:
    """LT22 Thm 3 as printed (rests on Conjecture 1; rate γ instead of k/n): NOT a certificate.

    ε(λ) ≤ 1/(λ−1)·log(e^{(λ−1)ε^SSG_{γ,1}(λ) − Δ²nγ/2} + e^{(λ−1)ε^SSG_{γ,k0+1}(λ)}), k0 = ⌊(1−Δ)nγ⌋,
    minimised over Δ in ``deltas`` (default a grid in (0, 1)) for each order.
    """
    arr = _check_orders(orders)
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma, allow_zero=False)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    grid = np.linspace(0.02, 0.98, 49) if deltas is None else np.asarray(deltas, dtype=np.float64)
    if grid.size == 0 or np.any((grid <= 0) | (grid >= 1)):
        raise ParameterError(f"Argument 'deltas' must be values in (0, 1), not {deltas!r}.")
    L = int(arr.max())
    lam = np.arange(2, L + 1)
    first = _wbk_log_moments(_sg_rdp_table(L, 1, sigma), gamma, lam)
    best = np.full(L - 1, np.inf)
    cache: dict[int, np.ndarray] = {}
    for d in grid:
        k0 = int(math.floor((1.0 - d) * n * gamma))
        k1 = min(k0 + 1, n)
        if k1 not in cache:
            cache[k1] = _wbk_log_moments(_sg_rdp_table(L, k1, sigma), gamma, lam)
        val = np.logaddexp(first - d * d * n * gamma / 2.0, cache[k1])
        best = np.minimum(best, val)
    result: npt.NDArray[np.float64] = best[arr - 2] / (arr - 1.0)
    return result
