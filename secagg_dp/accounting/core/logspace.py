"""Log-space numerical kernels shared by every accountant (pure functions on numpy arrays).

* :func:`log_expm1`, :func:`log1p_exp` -- log(e^x − 1) and log(1 + e^x) with full relative precision.
* :func:`log_comb` -- log C(n, k) via log-gamma.
* :func:`log_binomial_sum` -- log Σ_{j=j0}^{λ} C(λ, j)·e^{t[r, j]} for every row r and order λ at once, by
  chunked, rescaled BLAS products. Every subsampled-RDP sum of this package (WBK19 Thm 9 and Thm 27,
  MTZ19) has this form, so they all share it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln

__all__ = ["log_expm1", "log1p_exp", "log_comb", "log_binomial_sum"]


def log_expm1(x: Any) -> npt.NDArray[np.float64]:
    """log(e^x − 1) for x ≥ 0 without overflow or cancellation (−inf at x = 0, x at x = inf)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        result: npt.NDArray[np.float64] = np.where(np.isposinf(x), x, x + np.log(-np.expm1(-x)))
        return result


def log1p_exp(x: Any) -> npt.NDArray[np.float64]:
    """log(1 + e^x) without overflow and with full relative precision for very negative x."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        result: npt.NDArray[np.float64] = np.where(
            x < 0.0, np.log1p(np.exp(np.minimum(x, 0.0))), x + np.log1p(np.exp(-np.abs(x)))
        )
        return result


def log_comb(n: Any, k: Any) -> npt.NDArray[np.float64]:
    """log C(n, k) via log-gamma (broadcasting, exact to float rounding for n up to ~1e15)."""
    n = np.asarray(n, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    result: npt.NDArray[np.float64] = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
    return result


_CHUNK = 32
_FLAG = -400.0  # a partial-order sum whose largest kept term is below e^-400 of the chunk scale is redone
_NEGLIGIBLE = -40.0  # a chunk whose upper bound is below e^-40 of the running sum is skipped (< 1e-17 rel.)


def log_binomial_sum(t: np.ndarray, orders: np.ndarray, j0: int) -> np.ndarray:
    """Return L[r, i] = log Σ_{j=j0}^{orders[i]} C(orders[i], j)·exp(t[r, j]) (``-inf`` if empty).

    ``t`` has shape (R, J+1) with J ≥ max(orders); entries may be ``-inf`` or ``+inf`` (then every sum
    including that term is ``+inf``), never NaN. The sum is split into chunks of
    32 consecutive j; inside a chunk the rows are rescaled by their maximum and the binomial weights by
    theirs (which vary by at most e^178 within a chunk), so a BLAS product loses only terms below e^-745 of
    the chunk maximum (relative loss < 1e-70). Orders falling inside a chunk use a masked product; rows
    whose kept terms would be below e^-400 of the rescaling are recomputed directly in log space. A chunk
    is skipped for a row when its upper bound (32 × largest term) is below e^-40 of the running sum at
    every order (total omission < 1e-16 relative; callers that certify add a rounding guard).
    """
    t = np.asarray(t, dtype=np.float64)
    orders = np.asarray(orders, dtype=np.int64)
    n_rows, width = t.shape
    jmax = int(orders.max())
    if width < jmax + 1:
        raise ValueError("t must have a column for every j up to max(orders)")
    if np.any(np.isnan(t[:, j0 : jmax + 1])):
        raise ValueError("t must not contain NaN")
    posinf = np.isposinf(t[:, : jmax + 1])
    posinf[:, :j0] = False
    if np.any(posinf):
        # a +inf term makes every sum that includes it +inf (binomial weights are > 0); computed apart so
        # an infinite moment is never mistaken for an empty one
        first = np.where(np.any(posinf, axis=1), np.argmax(posinf, axis=1), jmax + 1)
        finite = log_binomial_sum(np.where(posinf, -np.inf, t[:, : jmax + 1]), orders, j0)
        return np.where(orders[None, :] >= first[:, None], np.inf, finite)
    lfact = gammaln(np.arange(jmax + 2, dtype=np.float64) + 1.0)  # lfact[m] = log(m!)
    perm = np.argsort(orders, kind="stable")
    lam = orders[perm]
    acc = np.full((n_rows, lam.size), -np.inf)
    started = False
    log_chunk = math.log(_CHUNK)
    for c0 in range(j0, jmax + 1, _CHUNK):
        c1 = min(c0 + _CHUNK - 1, jmax)
        i0 = int(np.searchsorted(lam, c0, side="left"))
        if i0 == lam.size:
            continue
        js = np.arange(c0, c1 + 1)
        la = lam[i0:]
        diff = la[:, None] - js[None, :]
        v = np.where(diff >= 0, lfact[la][:, None] - lfact[np.maximum(diff, 0)], -np.inf)
        a = np.max(v, axis=1)
        amat = np.exp(v - a[:, None])
        u_all = t[:, c0 : c1 + 1] - lfact[js][None, :]
        m_all = np.max(u_all, axis=1)
        if started:
            # conservative: skip only if the chunk bound is negligible against the smallest running sum
            floor = np.min(acc[:, i0:], axis=1)
            with np.errstate(invalid="ignore"):
                need = (m_all + float(np.max(a)) + log_chunk > floor + _NEGLIGIBLE) & np.isfinite(m_all)
        else:
            need = np.isfinite(m_all)
        if not np.any(need):
            continue
        every = bool(np.all(need))
        rows = slice(None) if every else np.nonzero(need)[0]
        u = u_all[rows]
        m = m_all[rows]
        bmat = np.exp(u - m[:, None])
        with np.errstate(divide="ignore"):
            contrib = m[:, None] + a[None, :] + np.log(bmat @ amat.T)
        part = np.nonzero(la < c1)[0]
        if part.size:
            cummax = np.maximum.accumulate(u, axis=1) - m[:, None]
            kept = cummax[:, la[part] - c0]
            bad_any = kept < _FLAG
            for col in np.nonzero(np.any(bad_any, axis=0))[0]:
                i = part[col]
                bad = bad_any[:, col]
                li = int(la[i])
                w = lfact[li] - lfact[li - js[: li - c0 + 1]]
                x = u[bad][:, : li - c0 + 1] + w[None, :]
                mx = np.max(x, axis=1)
                with np.errstate(invalid="ignore"):
                    val = mx + np.log(np.sum(np.exp(x - mx[:, None]), axis=1))
                val[~np.isfinite(mx)] = -np.inf
                contrib[bad, i] = val
        if not started:
            acc[rows, i0:] = contrib
            started = True
        elif every:
            np.logaddexp(acc[:, i0:], contrib, out=acc[:, i0:])
        else:
            sub = acc[rows, i0:]
            acc[rows, i0:] = np.logaddexp(sub, contrib)
    out = np.empty_like(acc)
    out[:, perm] = acc
    return out
