"""Binomial check-in probabilities in log space (used by the check-in and shuffled check-in accountants).

* :func:`log_binom_pmf` -- log P(K = k), K ~ Binomial(n, p), by Loader's saddle-point form (Loader 2000,
  "Fast and accurate computation of binomial probabilities"): no cancellation of ``lgamma(n+1)`` at
  n = 10^9, so relative error ~1e-15 instead of ~1e-6.
* :func:`log_binom_tail_ub` -- a rigorous upper bound on the mass of a block of k.
* :func:`binom_window_edge` -- the outermost k whose tail beyond it has that bound below a budget.

The subsampling sums the check-in mixture needs live in the core
(:mod:`secagg_dp.accounting.core.subsampling`, :mod:`secagg_dp.accounting.core.logspace`).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln

__all__ = ["log_binom_pmf", "log_binom_tail_ub", "binom_window_edge"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _stirlerr(n: np.ndarray) -> np.ndarray:
    """log(n!) - log(sqrt(2 pi n) (n/e)^n) (Loader 2000); n >= 1."""
    n = np.asarray(n, dtype=np.float64)
    out = np.empty_like(n)
    big = n > 15.0
    nb = n[big]
    nn = nb * nb
    s0, s1, s2, s3, s4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
    out[big] = (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / nb
    ns = n[~big]
    out[~big] = gammaln(ns + 1.0) - (ns + 0.5) * np.log(ns) + ns - _HALF_LOG_2PI
    return out


def _bd0(x: npt.ArrayLike, m: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Deviance x log(x/m) + m - x >= 0, accurate when x ~ m (Loader 2000); x, m > 0."""
    x = np.asarray(x, dtype=np.float64)
    m = np.broadcast_to(np.asarray(m, dtype=np.float64), x.shape)
    out = x * np.log(x / m) + m - x
    close = np.abs(x - m) < 0.1 * (x + m)
    if np.any(close):
        xc, mc = x[close], m[close]
        e = (xc - mc) / (xc + mc)
        e2 = e * e
        s = (xc - mc) * e
        term = 2.0 * xc * e
        acc = np.zeros_like(xc)
        for j in range(1, 60):
            term = term * e2
            step = term / (2 * j + 1)
            # |e| < 0.1 and every step has its accumulator's sign, so every later step is smaller than this
            # one: once each is under half an ulp of its accumulator, the remaining additions round to no
            # change (the sum is what 59 steps would give)
            if not np.any(np.abs(step) >= 0.5 * np.abs(np.spacing(acc))):
                break
            acc = acc + step
        out[close] = s + acc
    result: npt.NDArray[np.float64] = np.maximum(out, 0.0)
    return result


def log_binom_pmf(n: int, k: np.ndarray, p: float) -> np.ndarray:
    """log P(K = k) for K ~ Binomial(n, p), 0 <= k <= n (Loader's saddle-point form, exact up to rounding)."""
    k = np.asarray(k, dtype=np.float64)
    out = np.full(k.shape, -np.inf)
    if p == 0.0:
        out[k == 0] = 0.0
        return out
    if p == 1.0:
        out[k == n] = 0.0
        return out
    lq = math.log1p(-p)
    lp = math.log(p)
    out[k == 0] = n * lq
    out[k == n] = n * lp
    mid = (k > 0) & (k < n)
    km = k[mid]
    nf = float(n)
    out[mid] = (
        _stirlerr(np.array([nf]))[0]
        - _stirlerr(km)
        - _stirlerr(nf - km)
        - _bd0(km, nf * p)
        - _bd0(nf - km, nf * (1.0 - p))
        + 0.5 * np.log(nf / (2.0 * math.pi * km * (nf - km)))
    )
    return out


def log_binom_tail_ub(n: int, a: np.ndarray, b: np.ndarray, p: float) -> npt.NDArray[np.float64]:
    """Rigorous upper bound on log P(a <= K <= b), K ~ Binomial(n, p), for integer blocks a <= b.

    Minimum of three valid bounds: (i) (b - a + 1) * max pmf on the block (unimodality: the max is at the
    block point closest to the mode); (ii) geometric series with the pmf ratio bound r = k(1-p)/((n-k+1)p)
    (below the mode) or (n-k)p/((k+1)(1-p)) (above), which is monotone, so the block sum is at most
    pmf(edge)/(1-r_edge); (iii) Chernoff-Hoeffding exp(-n KL(b/n || p)) for b <= np, resp.
    exp(-n KL(a/n || p)) for a >= np.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    mode = math.floor((n + 1) * p)
    mode = min(max(mode, 0), n)
    peak = np.clip(float(mode), a, b)
    lpk = log_binom_pmf(n, peak, p)
    bound = lpk + np.log(b - a + 1.0)
    nf = float(n)
    below = b < mode
    if np.any(below):
        bb = b[below]
        r = bb * (1.0 - p) / ((nf - bb + 1.0) * p)
        geo = np.where(r < 1.0, log_binom_pmf(n, bb, p) - np.log1p(-np.minimum(r, 1 - 1e-300)), np.inf)
        ch = np.full(bb.shape, np.inf)
        cmask = (bb > 0) & (bb <= nf * p)
        bc = bb[cmask]
        ch[cmask] = -(_bd0(bc, nf * p) + _bd0(nf - bc, nf * (1.0 - p)))
        bound[below] = np.minimum(bound[below], np.minimum(geo, ch))
    above = a > mode
    if np.any(above):
        aa = a[above]
        r = (nf - aa) * p / ((aa + 1.0) * (1.0 - p))
        geo = np.where(r < 1.0, log_binom_pmf(n, aa, p) - np.log1p(-np.minimum(r, 1 - 1e-300)), np.inf)
        ch = np.full(aa.shape, np.inf)
        cmask = (aa < nf) & (aa >= nf * p)
        ac = aa[cmask]
        ch[cmask] = -(_bd0(ac, nf * p) + _bd0(nf - ac, nf * (1.0 - p)))
        bound[above] = np.minimum(bound[above], np.minimum(geo, ch))
    result: npt.NDArray[np.float64] = np.minimum(bound, 0.0)
    return result


_FAN = 64  # candidates per round of the edge search


def binom_window_edge(n: int, p: float, log_budget: float, lower: bool) -> int:
    """Outermost k with :func:`log_binom_tail_ub` of P(K < k) (``lower``) or of P(K > k) <= ``log_budget``.

    ``lower``: the largest k in [0, mode] with log_binom_tail_ub(0, k - 1) <= budget (k = 0 always
    qualifies); else the smallest k in [mode, n] with log_binom_tail_ub(k + 1, n) <= budget (k = n always
    qualifies). The bound is non-decreasing in the block's outer end (each of its three parts is), so the
    qualifying k form an interval; it is searched 64 candidates at a time, one vectorised bound per round,
    which finds the same k as a bisection in a fifth of the rounds."""
    mode = min(max(math.floor((n + 1) * p), 0), n)
    nf = float(n)
    if lower:
        lo, hi = 0, mode  # the answer lies in [lo, hi]; lo qualifies
        while lo < hi:
            if hi - lo <= _FAN:
                cand = np.arange(lo + 1, hi + 1)
            else:
                cand = np.unique(np.linspace(lo + 1, hi, _FAN).astype(np.int64))
            c = cand.astype(np.float64)
            ok = log_binom_tail_ub(n, np.zeros(c.size), c - 1.0, p) <= log_budget
            bad = np.flatnonzero(~ok)
            first_bad = int(bad[0]) if bad.size else cand.size
            if first_bad > 0:
                lo = int(cand[first_bad - 1])
            hi = int(cand[first_bad]) - 1 if first_bad < cand.size else hi
        return lo
    lo, hi = mode, n  # the answer lies in [lo, hi]; hi qualifies
    while lo < hi:
        if hi - lo <= _FAN:
            cand = np.arange(lo, hi)
        else:
            cand = np.unique(np.linspace(lo, hi - 1, _FAN).astype(np.int64))
        c = cand.astype(np.float64)
        ok = log_binom_tail_ub(n, c + 1.0, np.full(c.size, nf), p) <= log_budget
        good = np.flatnonzero(ok)
        first_good = int(good[0]) if good.size else cand.size
        if first_good < cand.size:
            hi = int(cand[first_good])
        lo = int(cand[first_good - 1]) + 1 if first_good > 0 else lo
    return lo
