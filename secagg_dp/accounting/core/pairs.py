"""Rényi divergence of the dominating pair of the without-replacement subsampled Gaussian, replace-one.

Mechanism: a Gaussian sum (noise std s, replace-one L2 sensitivity Δ, noise multiplier z = s/Δ) run on a
uniformly random subset of size m out of N records, q = m/N. Zhu, Dong & Wang (2022, Theorem 10 with the
Gaussian pair): for every ordered pair of neighbours D, D' and every γ >= 1,

    H_γ(M(D) || M(D')) <= δ(log γ),  δ(ε) := H_{e^ε}(A || B),  A = q N(1, z²) + (1-q) N(0, z²),  B = N(0, z²)

(units of Δ). Both ordered pairs (D, D') and (D', D) obey it, so only γ >= 1 is needed. Rényi moments follow
from hockey-stick divergences by the integral representation of f-divergences (Taylor's formula with
integral remainder for φ(x) = x^λ − 1 − λ(x − 1) around x = 1):

    E_λ(P||Q) − 1 = λ(λ−1) ∫_0^∞ [ e^{(λ−1)ε} H_{e^ε}(P||Q) + e^{−λε} H_{e^ε}(Q||P) ] dε,

every term non-negative and non-decreasing in the hockey-stick divergences. Hence the RDP of the
mechanism at order λ is at most that of the *symmetrised* pair (both directions equal to δ):

    E_λ^sym − 1 = λ(λ−1) ∫_0^∞ (e^{(λ−1)ε} + e^{−λε}) δ(ε) dε
                = [E_λ(A||B) − 1] + λ(λ−1) ∫_0^∞ e^{−λε} (δ(ε) − δ_rev(ε)) dε,

δ_rev(ε) = H_{e^ε}(B || A). The first part is exact for integer λ (Mironov, Talwar & Zhang 2019, Sec. 3.3:
the add/remove Poisson-subsampled Gaussian moment is E_λ(A||B)). The correction is a one-dimensional
integral with a decaying weight; it is bounded above rigorously on a geometric ε grid by monotonicity
(δ, δ_rev are non-increasing: δ at the left end, δ_rev at the right end of each cell, δ(ε_max) times the
weight's tail beyond the grid), with an explicit allowance for floating-point cancellation. On the
check-in reference settings it is 1.7–7 % of E − 1, and the resulting RDP is 0.24–0.54x that of WBK19
Theorem 27 (which bounds every replace-one pair, not just this one).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import special

from secagg_dp.accounting.core.logspace import log_expm1
from secagg_dp.accounting.core.subsampling import (
    _check_int_orders,
    _check_noise,
    _check_rates,
    _rows,
    poisson_subsampled_gaussian_log_am1,
)

__all__ = ["wor_gaussian_pair_log_am1", "wor_gaussian_pair_rdp"]

_RATIO = 1.005  # geometric grid ratio: the step bounds overstate E − 1 by about 0.2 % (measured)
_EPS_MAX = 40.0  # grid end at most; beyond it the weight e^{-λ ε} <= e^{-80}
_TAIL_Z = 38.0  # Gaussian tail argument, Φ(−38) < 1e−315: the grid ends where every δ/q is below that
_ULP = 1e-13  # relative rounding allowance on each term before a subtraction (a generous multiple of 2^-52)
_ROWS = 128
_MAX_POINTS = 20000  # per row
_CACHE: dict[tuple[float, float, bytes], np.ndarray] = {}  # (z, q, orders) -> row; the check-in mixture
_CACHE_ROWS = 8192  # re-evaluates the same client counts for every window candidate (oldest evicted first)


def _ndtr_diff(a: np.ndarray, b: np.ndarray) -> npt.NDArray[np.float64]:
    """Φ(a) − Φ(b) for a >= b without cancellation against 1/2 (each branch a sum or difference of tails).

    Each element is computed by its own branch only (the same formulas, evaluated on that branch's elements:
    the values equal those of evaluating every branch everywhere and selecting)."""
    a, b = np.broadcast_arrays(a, b)
    result: npt.NDArray[np.float64] = np.empty(a.shape)
    pos = b >= 0  # upper tails
    neg = ~pos & (a <= 0)  # lower tails
    mid = ~pos & ~neg
    with np.errstate(invalid="ignore"):
        ap, bp = a[pos], b[pos]
        result[pos] = special.ndtr(-bp) - special.ndtr(-ap)
        an, bn = a[neg], b[neg]
        result[neg] = special.ndtr(an) - special.ndtr(bn)
        am, bm = a[mid], b[mid]
        result[mid] = 0.5 * (special.erf(am / math.sqrt(2.0)) + special.erf(-bm / math.sqrt(2.0)))
    return result


def _forward_delta(z: np.ndarray, q: np.ndarray, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """δ(ε) = H_{e^ε}(A||B) = q H_{γ'}(N(1,z²)||N(0,z²)), γ' = 1 + expm1(ε)/q, and a rounding bound.

    Gaussian hockey stick at inner loss x: Φ(1/(2z) − x z) − e^x Φ(−1/(2z) − x z)
    = [Φ(a) − Φ(b)] − expm1(x) Φ(b), the last product in log space (x may exceed 700)."""
    with np.errstate(divide="ignore"):
        x = np.logaddexp(0.0, np.log(np.expm1(eps)) - np.log(q))  # log1p(expm1(ε)/q) without overflow
    a = 0.5 / z - x * z
    b = -0.5 / z - x * z
    first = _ndtr_diff(a, b)
    second = np.exp(log_expm1(x) + special.log_ndtr(b))
    d = q * np.maximum(first - second, 0.0)
    return d, q * _ULP * (first + second)


def _reverse_delta(z: np.ndarray, q: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """δ_rev(ε) = H_{e^ε}(B||A) (0 once e^ε >= 1/(1 − q)), minus its rounding bound (a lower value).

    B/A > g iff y < y0 = z² log t + 1/2 with t = (1/g − (1 − q))/q, so
    δ_rev = (1 − g(1 − q)) Φ(y0/z) − g q Φ((y0 − 1)/z)."""
    g = np.exp(eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = -np.expm1(eps + np.log1p(-q))  # 1 − g(1 − q); q = 1 gives log1p(−1) = −inf, rest = 1
        t = (np.expm1(-eps) + q) / q
        y0 = z * z * np.log(t) + 0.5
        p1 = rest * special.ndtr(y0 / z)
        p2 = g * q * special.ndtr((y0 - 1.0) / z)
        d = p1 - p2 - _ULP * (p1 + p2)
    return np.where((t > 0) & (rest > 0), np.maximum(d, 0.0), 0.0)


def _scales(z: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the ε scale on which δ falls (q·(e^{x*} − 1), x* the inner loss scale 1/z + 1/(2z²)) and the
    ε where δ < q Φ(−38) (inner loss (38 + 1/(2z))/z), both capped at inner loss 700."""
    with np.errstate(over="ignore", divide="ignore"):
        scale = np.exp(np.log(q) + log_expm1(np.minimum(1.0 / z + 0.5 / (z * z), 700.0)))
        top = np.log1p(q * np.expm1(np.minimum((_TAIL_Z + 0.5 / z) / z, 700.0)))
    return scale, top


def _lattice_range(scale: np.ndarray, top: np.ndarray, lam_max: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the indices [a, b] of its grid on the global lattice ε_i = _RATIO^i: from 1e-4 of its scale
    (or of the weight's 1/λ at λ = max(λ_max, 1024); never below 1e-280) to its top (at most 40), at most
    _MAX_POINTS points (a higher start only loosens the [0, ε_a] term). A row's grid depends on that row
    alone, so its value does not depend on which other rows are computed with it, nor (up to order 1024)
    on which other orders are."""
    step = math.log(_RATIO)
    hi = np.minimum(top, _EPS_MAX)
    lo = np.maximum(np.minimum(scale, 1.0 / max(lam_max, 1024.0)) * 1e-4, 1e-280)
    b = np.ceil(np.log(hi) / step).astype(np.int64)
    a = np.floor(np.log(lo) / step).astype(np.int64)
    a = np.minimum(np.maximum(a, b - _MAX_POINTS), b - 1)
    return a, b


def _cell_table(lo: int, hi: int, lam: np.ndarray) -> npt.NDArray[np.float64]:
    """∫_{ε_i}^{ε_{i+1}} e^{−λ ε} dε for the lattice cells i = lo .. hi − 1 (rows) and every λ (columns).

    Elementwise in (i, λ): a row depends on its lattice index alone, so a slice of a wider table holds the
    same numbers as a table computed for the slice."""
    eps = np.exp(np.arange(lo, hi + 1) * math.log(_RATIO))
    left, right = eps[:-1], eps[1:]
    with np.errstate(under="ignore"):
        cell: npt.NDArray[np.float64] = (
            np.exp(-np.outer(left, lam)) * (-np.expm1(-np.outer(right - left, lam))) / lam[None, :]
        )
    return cell


_CELLS: dict[bytes, tuple[int, np.ndarray]] = {}  # orders -> (first lattice index, cell table): one table
_CELLS_MAX = 2**22  # entries (32 MB) at most; a wider request is computed for itself and not kept


def _cells(lo: int, hi: int, lam: np.ndarray) -> npt.NDArray[np.float64]:
    """:func:`_cell_table` (lo, hi, λ), sliced from a table kept across calls and widened on demand (only the
    missing lattice cells are computed): every call and every chunk of rows shares the one global lattice."""
    key = lam.tobytes()
    hit = _CELLS.get(key)
    if hit is None or (max(hi, hit[0] + hit[1].shape[0]) - min(lo, hit[0])) * lam.size > _CELLS_MAX:
        tab = _cell_table(lo, hi, lam)
        if (hi - lo) * lam.size <= _CELLS_MAX:
            _CELLS.clear()
            _CELLS[key] = (lo, tab)
        return tab
    i0, tab = hit
    i1 = i0 + tab.shape[0]
    if lo < i0 or hi > i1:
        parts = [_cell_table(lo, i0, lam)] if lo < i0 else []
        parts.append(tab)
        if hi > i1:
            parts.append(_cell_table(i1, hi, lam))
        i0, tab = min(lo, i0), np.concatenate(parts, axis=0)
        _CELLS[key] = (i0, tab)
    return tab[lo - i0 : hi - i0]


def _correction_bound(z: np.ndarray, q: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Upper bound on λ(λ−1)∫_0^∞ e^{−λε}(δ − δ_rev) dε per row and order (it may be negative).

    Each row integrates on its own stretch [ε_a, ε_b] of a global geometric lattice (rows are sorted and
    chunked only to share the δ evaluations). On a cell [ε_i, ε_{i+1}] δ <= δ(ε_i) and δ_rev >= δ_rev(ε_{i+1})
    (both non-increasing); on [0, ε_a] δ <= δ(0); beyond ε_b, δ <= δ(ε_b) (δ_rev is dropped: a lower bound).
    The cell weights ∫ e^{−λε} over the lattice cells are shared by every call (:func:`_cells`)."""
    lam = orders.astype(np.float64)
    scale, top = _scales(z, q)
    first, last = _lattice_range(scale, top, float(lam.max()))
    order = np.argsort(first, kind="stable")
    out = np.empty((z.size, lam.size))
    if z.size:
        _cells(int(first.min()), int(last.max()), lam)  # one table for every chunk of this call
    for i in range(0, z.size, _ROWS):
        rows = order[i : i + _ROWS]
        a, b = first[rows], last[rows]
        lo, hi = int(a.min()), int(b.max())
        idx = np.arange(lo, hi + 1)
        eps = np.exp(idx * math.log(_RATIO))
        cell = _cells(lo, hi, lam)  # ∫_{ε_i}^{ε_{i+1}} e^{−λ ε} dε
        zr, qr = z[rows, None], q[rows, None]
        at = np.concatenate(([0.0], eps))[None, :]
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            fwd, err = _forward_delta(zr, qr, at)
            rev = _reverse_delta(zr, qr, at)
        up = fwd + err
        inside = (idx[None, :-1] >= a[:, None]) & (idx[None, 1:] <= b[:, None])  # the row's own cells
        upper = np.where(inside, up[:, 1:-1], 0.0) @ cell
        lower = np.where(inside, rev[:, 2:], 0.0) @ cell
        pos_a, pos_b = a - idx[0], b - idx[0]  # positions of ε_a, ε_b in eps
        with np.errstate(under="ignore"):
            tail = np.exp(-np.outer(eps[pos_b], lam)) / lam[None, :]  # ∫_{ε_b}^∞ e^{−λ ε} dε
        ar = np.arange(rows.size)
        upper += (up[:, 0] * eps[pos_a])[:, None] + up[ar, pos_b + 1][:, None] * tail
        out[rows] = lam * (lam - 1.0) * (upper - lower)
    return out


def wor_gaussian_pair_log_am1(noise_multiplier: Any, rate: Any, orders: Any) -> np.ndarray:
    """log(E_λ − 1), an upper bound, for sampling without replacement at rate q, **replace-one**, Gaussian.

    E_λ is the Rényi moment of the symmetrised dominating pair of Zhu, Dong & Wang (2022, Thm 10) described
    in this module's docstring: the exact MTZ19 moment of (q N(1, z²) + (1−q) N(0, z²), N(0, z²)) plus a
    rigorously bounded symmetrisation term. z = σ/Δ₂ with Δ₂ the replace-one sensitivity (as for
    :func:`~secagg_dp.accounting.core.subsampling.wor_subsampled_gaussian_log_am1`). Integer orders;
    broadcasts over ``noise_multiplier`` and ``rate``. Non-decreasing in q and in 1/z (the pair at larger q
    or smaller z post-processes into the other).
    """
    a = _check_int_orders(orders)
    z = _check_noise("noise_multiplier", noise_multiplier)
    q = _check_rates("rate", rate)
    lead = np.broadcast_shapes(z.shape, q.shape)
    zr, qr = _rows(lead, z, q)
    key = a.tobytes()
    out = np.empty((zr.size, a.size))
    todo = []
    for i, (zi, qi) in enumerate(zip(zr.tolist(), qr.tolist(), strict=True)):
        hit = _CACHE.get((zi, qi, key))
        if hit is None:
            todo.append(i)
        else:
            out[i] = hit
    if todo:
        idx = np.array(todo)
        out[idx] = _pair_rows(zr[idx], qr[idx], a)
        for i in todo:
            _CACHE[(float(zr[i]), float(qr[i]), key)] = out[i].copy()
        while len(_CACHE) > _CACHE_ROWS:
            _CACHE.pop(next(iter(_CACHE)))
    return out.reshape(lead + (a.size,))


def _pair_rows(zr: np.ndarray, qr: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Rows of :func:`wor_gaussian_pair_log_am1`. The correction is at most (λ−1)q (δ <= δ(0) <= q, and
    λ(λ−1)∫e^{−λε}dε = λ−1); where that crude bound is below 1e-4 of E − 1 at every order (small noise),
    or z < 1e-3 (the grid would span hundreds of decades), it is used instead of the integral."""
    base = poisson_subsampled_gaussian_log_am1(zr, qr, a)
    live = (qr > 0.0) & np.isfinite(zr) & (zr > 0.0)
    out = base.copy()
    with np.errstate(divide="ignore", invalid="ignore"):  # inf − inf: no finite moment, crude bound unused
        crude = np.log(a - 1.0)[None, :] + np.log(qr)[:, None]
        small = np.all(crude - base <= math.log(1e-4), axis=1) | (zr < 1e-3)
    if np.any(live):
        corr = np.where(small[live, None], np.exp(crude[live]), 0.0)
        need = live & ~small
        if np.any(need):
            corr[~small[live]] = _correction_bound(zr[need], qr[need], a)
        b = base[live]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            ratio = np.sign(corr) * np.exp(np.log(np.abs(corr)) - b)  # corr / (E − 1)
            adj = b + np.log1p(np.maximum(ratio, -1.0 + 1e-12))
        out[live] = np.where(np.isfinite(b), np.where(corr == 0.0, b, adj), b) + 1e-9  # + rounding guard
    return out


def wor_gaussian_pair_rdp(noise_multiplier: Any, rate: Any, orders: Any) -> npt.NDArray[np.float64]:
    """RDP ε(λ) = log1p(E_λ − 1)/(λ − 1) from :func:`wor_gaussian_pair_log_am1`, capped by the Gaussian's
    λ/(2z²) (subsampling never hurts); integer orders."""
    a = _check_int_orders(orders)
    z = _check_noise("noise_multiplier", noise_multiplier)
    la = wor_gaussian_pair_log_am1(z, rate, a)
    rdp = np.logaddexp(0.0, la) / (a - 1.0)
    with np.errstate(divide="ignore"):
        cap = a / (2.0 * np.asarray(z, dtype=np.float64)[..., None] ** 2)
    result: npt.NDArray[np.float64] = np.minimum(rdp, cap)
    return result
