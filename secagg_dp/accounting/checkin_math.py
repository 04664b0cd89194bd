"""Numerical kernels of the check-in accountant (log space, vectorised over rows and orders).

* :func:`log_binom_pmf` -- log P(K = k), K ~ Binomial(n, p), by Loader's saddle-point form (Loader 2000,
  "Fast and accurate computation of binomial probabilities"): no cancellation of ``lgamma(n+1)`` at
  n = 10^9, so relative error ~1e-15 instead of ~1e-6.
* :func:`log_binomial_sum` -- log sum_{j=j0}^{lam} C(lam, j) exp(t[r, j]) for every row r and order lam,
  computed with chunked, rescaled BLAS products (no underflow of dominant terms; see its docstring).
* :func:`wor_thm9_log_am1` -- log(A - 1) of Theorem 9 of Wang, Balle & Kasiviswanathan (AISTATS 2019,
  "Subsampled Renyi DP and analytical moments accountant"), sampling without replacement, replace-one.
* :func:`poisson_gaussian_log_a` -- log A_lam of the Poisson-subsampled Gaussian, add/remove, integer
  orders (Mironov, Talwar & Zhang 2019, Sec. 3.3, exact).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

__all__ = [
    "log_expm1",
    "log_binom_pmf",
    "log_binom_tail_ub",
    "log_binomial_sum",
    "wor_thm9_log_am1",
    "poisson_gaussian_log_a",
]

_LOG2 = math.log(2.0)
_LOG4 = math.log(4.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def log_expm1(x: np.ndarray | float) -> np.ndarray:
    """Return log(exp(x) - 1) for x >= 0 without overflow or cancellation (-inf at x = 0)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return x + np.log(-np.expm1(-x))


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


def _bd0(x: np.ndarray, m: np.ndarray) -> np.ndarray:
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
            acc = acc + term / (2 * j + 1)
        out[close] = s + acc
    return np.maximum(out, 0.0)


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


def log_binom_tail_ub(n: int, a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
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
    return np.minimum(bound, 0.0)


_CHUNK = 32
_FLAG = -400.0  # a partial-order sum whose largest kept term is below e^-400 of the chunk scale is redone
_NEGLIGIBLE = -40.0  # a chunk whose upper bound is below e^-40 of the running sum is skipped (< 1e-17 rel.)


def log_binomial_sum(t: np.ndarray, orders: np.ndarray, j0: int) -> np.ndarray:
    """Return L[r, i] = log sum_{j=j0}^{orders[i]} C(orders[i], j) exp(t[r, j]) (``-inf`` if empty).

    ``t`` has shape (R, J+1) with J >= max(orders); entries may be ``-inf``. The sum is split into chunks of
    32 consecutive j; inside a chunk the rows are rescaled by their maximum and the binomial weights by
    theirs (which vary by at most e^178 within a chunk), so a BLAS product loses only terms below e^-745 of
    the chunk maximum (relative loss < 1e-70). Orders falling inside a chunk use a masked product; rows
    whose kept terms would be below e^-400 of the rescaling are recomputed directly in log space. A chunk
    is skipped for a row when its upper bound (32 x largest term) is below e^-40 of the running sum at
    every order (total omission < 1e-16 relative, absorbed by the caller's rounding guard).
    """
    t = np.asarray(t, dtype=np.float64)
    orders = np.asarray(orders, dtype=np.int64)
    n_rows, width = t.shape
    jmax = int(orders.max())
    if width < jmax + 1:
        raise ValueError("t must have a column for every j up to max(orders)")
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


def wor_thm9_log_am1(log_q: np.ndarray, base: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """log(A - 1) of WBK19 Theorem 9 (subsampling without replacement, replace-one, eps(inf) = inf).

    A(lam) = 1 + q^2 C(lam,2) min{4(e^{eps(2)} - 1), 2 e^{eps(2)}} + sum_{j=3}^{lam} 2 q^j C(lam,j) e^{(j-1) eps(j)},
    so the subsampled RDP is log(A)/(lam-1). ``base[r, j]`` = eps_r(j) for j = 2..max(orders) (columns 0, 1
    unused); ``log_q`` has shape (R,). Returns shape (R, len(orders)). Since every term is non-decreasing
    in q and in each eps(j), an upper bound on q and on the eps(j) gives an upper bound on A.
    """
    base = np.asarray(base, dtype=np.float64)
    log_q = np.asarray(log_q, dtype=np.float64)
    orders = np.asarray(orders, dtype=np.int64)
    jmax = int(orders.max())
    j = np.arange(jmax + 1, dtype=np.float64)
    t = np.full(base.shape[:1] + (jmax + 1,), -np.inf)
    t[:, 3:] = _LOG2 + j[None, 3:] * log_q[:, None] + (j[None, 3:] - 1.0) * base[:, 3 : jmax + 1]
    e2 = base[:, 2]
    t[:, 2] = 2.0 * log_q + np.minimum(_LOG4 + log_expm1(e2), _LOG2 + e2)
    return log_binomial_sum(t, orders, 2)


def poisson_gaussian_log_a(q: float, inv_z2: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """log A_lam for the Poisson(q)-subsampled Gaussian with noise multiplier z, add/remove, integer lam.

    A_lam = sum_{j=0}^{lam} C(lam,j) (1-q)^{lam-j} q^j exp((j^2 - j)/(2 z^2)) (Mironov, Talwar & Zhang 2019,
    Sec. 3.3); RDP = log(A_lam)/(lam-1). ``inv_z2`` = 1/z^2 per row. Non-decreasing in 1/z^2.
    """
    inv_z2 = np.asarray(inv_z2, dtype=np.float64)
    orders = np.asarray(orders, dtype=np.int64)
    if q == 1.0:
        return (orders * (orders - 1))[None, :] * inv_z2[:, None] / 2.0
    if q == 0.0:
        return np.zeros((inv_z2.size, orders.size))
    jmax = int(orders.max())
    j = np.arange(jmax + 1, dtype=np.float64)
    t = j[None, :] * (math.log(q) - math.log1p(-q)) + (j * j - j)[None, :] * inv_z2[:, None] / 2.0
    return log_binomial_sum(t, orders, 0) + orders[None, :] * math.log1p(-q)
