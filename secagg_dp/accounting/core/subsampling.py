"""Privacy amplification by subsampling for Rényi DP, in log space and broadcasting over batch axes.

Conventions shared by every function here:

* ``orders`` is a 1-D array of orders α > 1. The theorems are stated for integer α; a fractional α is
  handled by linear interpolation of the cumulant K(α) = (α−1)ε(α) between ⌊α⌋ and ⌈α⌉ (K is convex in
  α and K(1) = 0, so the interpolation is an upper bound; Wang, Balle & Kasiviswanathan 2019, Cor. 10).
  The ``*_log_am1`` functions take integer orders only.
* ``rate`` (and ``noise_multiplier``) broadcast against the leading axes; ``base_rdp_int[..., j]`` is the
  base mechanism's RDP at the integer order j for j = 0..J−1 (entries j < 2 are ignored). The result has
  shape ``broadcast(leading axes) + (len(orders),)``.
* Each bound is a moment A(α) = E[(P/Q)^α] ≥ 1 written as 1 + Σ_{j≥2} (non-negative terms). The
  ``*_log_am1`` functions return log(A − 1) — full relative precision even when ε ~ 1e−15, which the
  check-in mixture needs — and the ``*_rdp`` functions are log1p(A − 1)/(α − 1), capped by the
  unsubsampled RDP (subsampling never hurts; the general theorems alone have a noise-independent floor).
* All sums are log-sum-exp / rescaled BLAS (:func:`secagg_dp.accounting.core.logspace.log_binomial_sum`);
  orders up to 1024 (and beyond) give no overflow, underflow or NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, log_ndtr, logsumexp

from secagg_dp.accounting.core.logspace import log1p_exp, log_binomial_sum, log_comb, log_expm1
from secagg_dp.accounting.core.rdp import check_orders, interpolate_cumulant
from secagg_dp.errors import ParameterError

__all__ = [
    "integer_rdp_table",
    "wor_subsampled_log_am1",
    "wor_subsampled_rdp",
    "wor_subsampled_gaussian_log_am1",
    "wor_subsampled_gaussian_rdp",
    "poisson_subsampled_gaussian_log_am1",
    "poisson_subsampled_gaussian_rdp",
    "poisson_subsampled_rdp",
    "revealed_participation_rdp",
]

_LOG2 = math.log(2.0)
_LOG3 = math.log(3.0)
_LOG4 = math.log(4.0)


def integer_rdp_table(rdp: Callable[[np.ndarray], np.ndarray], max_order: int) -> np.ndarray:
    """Base RDP at the integer orders 0..max_order (entries 0 and 1 set to 0, never read)."""
    if max_order < 2:
        raise ParameterError(f"Argument 'max_order' must be an integer >= 2, not {max_order!r}.")
    table = np.asarray(rdp(np.arange(2, max_order + 1, dtype=np.float64)), dtype=np.float64)
    lead = table.shape[:-1]
    return np.concatenate([np.zeros(lead + (2,)), table], axis=-1)


def _check_rates(name: str, rate: Any) -> np.ndarray:
    r = np.asarray(rate, dtype=np.float64)
    if not np.all(np.isfinite(r)) or np.any((r < 0.0) | (r > 1.0)):
        raise ParameterError(f"Argument '{name}' must contain probabilities in [0, 1], not {rate!r}.")
    return r


def _check_noise(name: str, z: Any) -> npt.NDArray[np.float64]:
    arr = np.asarray(z, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0.0):
        raise ParameterError(f"Argument '{name}' must contain finite values > 0, not {arr!r}.")
    return arr


def _check_table(base_rdp_int: Any, orders: np.ndarray) -> np.ndarray:
    t = np.asarray(base_rdp_int, dtype=np.float64)
    if t.ndim < 1:
        raise ParameterError("Argument 'base_rdp_int' must have a last axis indexed by integer order.")
    need = int(math.ceil(float(orders.max())))
    if t.shape[-1] < need + 1:
        raise ParameterError(
            f"Argument 'base_rdp_int' must cover integer orders 0..{need} (last axis length {need + 1}), "
            f"not length {t.shape[-1]}."
        )
    body = t[..., 2 : need + 1]
    if np.any(np.isnan(body)) or np.any(body < 0.0):
        raise ParameterError("Argument 'base_rdp_int' must hold RDP values >= 0 (inf allowed) at orders >= 2.")
    return t


def _xlogy(k: npt.NDArray[np.float64] | np.float64, logy: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """k·log y with 0·(−inf) = 0."""
    with np.errstate(invalid="ignore"):
        return np.where(k == 0, 0.0, k * logy)


def _assemble(orders: np.ndarray, lead: tuple[int, ...], log_a: Callable[[int], np.ndarray]) -> np.ndarray:
    """Evaluate ε at every order from the integer cumulants K(α) = log A_α (interpolating fractions)."""
    cache: dict[int, np.ndarray] = {1: np.zeros(lead)}

    def K(a: int) -> np.ndarray:
        if a not in cache:
            cache[a] = np.asarray(log_a(a), dtype=np.float64).reshape(lead)
        return cache[a]

    out = np.empty(lead + (orders.size,))
    for i, a in enumerate(orders):
        lo, hi = math.floor(a), math.ceil(a)
        if lo == hi:
            k = K(lo)
        else:
            t = a - lo
            k = (1.0 - t) * K(lo) + t * K(hi)
        out[..., i] = k / (a - 1.0)
    return out


def _check_int_orders(orders: Any) -> np.ndarray:
    a = check_orders(orders)
    if np.any(a != np.round(a)):
        raise ParameterError(f"Argument 'orders' must be integers >= 2 for a log(A - 1) bound, not {orders!r}.")
    return a.astype(np.int64)


def _rows(lead: tuple[int, ...], *arrays: np.ndarray) -> list[np.ndarray]:
    """Broadcast each array (trailing axis kept) to ``lead`` and flatten the leading axes."""
    out = []
    for x in arrays:
        x = np.broadcast_to(x, lead + x.shape[len(lead) :]) if x.ndim > len(lead) else np.broadcast_to(x, lead)
        out.append(x.reshape((-1,) + x.shape[len(lead) :]))
    return out


def _gaussian_rows(
    noise_multiplier: Any, rate: Any, orders: Any
) -> tuple[np.ndarray, tuple[int, ...], np.ndarray, np.ndarray]:
    """The checked arguments of a subsampled-Gaussian log(A − 1) kernel: integer orders, the broadcast shape of
    (z, rate), and z and the rate as rows of that shape."""
    a = _check_int_orders(orders)
    z = _check_noise("noise_multiplier", noise_multiplier)
    q = _check_rates("rate", rate)
    lead = np.broadcast_shapes(z.shape, q.shape)
    zr, qr = _rows(lead, z, q)
    return a, lead, zr, qr


def _from_log_am1(orders: np.ndarray, log_am1: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """ε at every order from log(A − 1) at the integer orders needed (fractional: interpolated cumulant)."""
    return interpolate_cumulant(orders, lambda ints: log1p_exp(log_am1(ints.astype(np.int64))))


def _half_inv_square(z: np.ndarray) -> np.ndarray:
    """1/(2z²) computed as (1/z)²/2: z² underflows for z < 1e-154; the result is +inf only on true overflow."""
    with np.errstate(over="ignore"):
        return (1.0 / z) ** 2 / 2.0


def _gaussian_cap(a: np.ndarray, z: np.ndarray) -> npt.NDArray[np.float64]:
    """α/(2z²), the unsubsampled Gaussian RDP (Mironov 2017, Prop. 7); +inf when it exceeds 1.8e308."""
    with np.errstate(over="ignore"):
        result: npt.NDArray[np.float64] = a * _half_inv_square(z)[..., None]
        return result


def _thm9_second(e2: np.ndarray) -> np.ndarray:
    """log of the j = 2 factor of WBK19 Thm 9: min{4(e^{ε(2)} − 1), 2e^{ε(2)}}."""
    return np.minimum(_LOG4 + log_expm1(e2), _LOG2 + e2)


def wor_subsampled_log_am1(base_rdp_int: Any, rate: Any, orders: Any) -> np.ndarray:
    """log(A − 1) of WBK19 Theorem 9: subsampling without replacement at rate γ = m/N, **replace-one**.

    Wang, Balle & Kasiviswanathan 2019, Theorem 9 (without the optional ε(∞) refinement), integer α:
    A(α) = 1 + γ²C(α,2)·min{4(e^{ε(2)}−1), 2e^{ε(2)}} + Σ_{j=3}^{α} 2γ^j C(α,j) e^{(j−1)ε(j)}, and
    ε'(α) ≤ log A(α)/(α−1). Every term is non-decreasing in γ and in each ε(j), so upper bounds on those
    give an upper bound on A. Not capped here (see :func:`wor_subsampled_rdp`).
    """
    a = _check_int_orders(orders)
    t = _check_table(base_rdp_int, a.astype(np.float64))
    g = _check_rates("rate", rate)
    lead = np.broadcast_shapes(t.shape[:-1], g.shape)
    tr, gr = _rows(lead, t, g)
    jmax = int(a.max())
    with np.errstate(divide="ignore"):
        lg = np.log(gr)[:, None]
    j = np.arange(jmax + 1, dtype=np.float64)
    terms = np.full((tr.shape[0], jmax + 1), -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):  # (j − 1)·ε(j) may overflow to +inf: a true +inf
        terms[:, 3:] = _LOG2 + _xlogy(j[3:], lg) + (j[3:] - 1.0) * tr[:, 3 : jmax + 1]
        terms[:, 2] = _xlogy(np.float64(2.0), lg[:, 0]) + _thm9_second(tr[:, 2])
    terms[gr == 0.0] = -np.inf  # γ = 0 never touches the data, even when the base moment is infinite
    return log_binomial_sum(terms, a, 2).reshape(lead + (a.size,))


def wor_subsampled_rdp(base_rdp_int: Any, rate: Any, orders: Any) -> npt.NDArray[np.float64]:
    """Sampling a fixed-size subset without replacement (rate γ = m/N), **replace-one** neighbours.

    WBK19 Theorem 9 (:func:`wor_subsampled_log_am1`), ε'(α) = log A(α)/(α−1), then min with ε(α).
    """
    a = check_orders(orders)
    t = _check_table(base_rdp_int, a)
    sub = _from_log_am1(a, lambda ints: wor_subsampled_log_am1(t, rate, ints))
    lead = sub.shape[:-1]
    result: npt.NDArray[np.float64] = np.minimum(sub, _base_at(np.broadcast_to(t, lead + t.shape[-1:]), a))
    return result


def _base_at(t: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Base RDP at the requested orders from the integer table (fractional: interpolated cumulant)."""
    lead = t.shape[:-1]
    return _assemble(orders, lead, lambda a: (a - 1.0) * t[..., a])


def poisson_subsampled_rdp(base_rdp_int: Any, rate: Any, orders: Any) -> np.ndarray:
    """Poisson sampling with probability γ, **add/remove** neighbours, any base mechanism.

    Zhu & Wang 2019, Theorem 5 (general upper bound):
    ε'(α) ≤ 1/(α−1)·log((1−γ)^{α−1}(αγ−γ+1) + C(α,2)γ²(1−γ)^{α−2}e^{ε(2)}
                       + 3Σ_{l=3}^{α} C(α,l)(1−γ)^{α−l}γ^l e^{(l−1)ε(l)}), then min with ε(α).
    """
    a = check_orders(orders)
    t = _check_table(base_rdp_int, a)
    g = _check_rates("rate", rate)
    lead = np.broadcast_shapes(t.shape[:-1], g.shape)
    t = np.broadcast_to(t, lead + t.shape[-1:])
    gb = np.broadcast_to(g, lead)[..., None]
    with np.errstate(divide="ignore"):
        lg = np.log(gb)
        l1g = np.log1p(-gb)

    def log_a(alpha: int) -> npt.NDArray[np.float64]:
        head = _xlogy(np.float64(alpha - 1), l1g) + np.log1p((alpha - 1) * gb)
        j = np.arange(2, alpha + 1, dtype=np.float64)
        coef = np.where(j == 2, 0.0, _LOG3)
        terms = coef + log_comb(alpha, j) + _xlogy(j, lg) + _xlogy(alpha - j, l1g)
        with np.errstate(invalid="ignore", over="ignore"):  # weight 0 (γ = 1) times e^{+inf} counts as 0
            terms = np.where(np.isneginf(terms), -np.inf, terms + (j - 1.0) * t[..., 2 : alpha + 1])
        result: npt.NDArray[np.float64] = logsumexp(np.concatenate([head, terms], axis=-1), axis=-1)
        return result

    # A ≥ 1, so log A ≥ 0: a value a rounding error below 0 (seen at sigma ~ 1e8) is reported as 0
    sub = np.maximum(_assemble(a, lead, log_a), 0.0)
    result: npt.NDArray[np.float64] = np.minimum(sub, _base_at(t, a))
    return result


def poisson_subsampled_gaussian_log_am1(noise_multiplier: Any, rate: Any, orders: Any) -> np.ndarray:
    """log(A − 1) of the Poisson-subsampled Gaussian, **add/remove**, z = σ/Δ₂, integer α (exact).

    Mironov, Talwar & Zhang 2019, Section 3.3: A(α) = Σ_{j=0}^{α} C(α,j)(1−q)^{α−j} q^j e^{(j²−j)/(2z²)}.
    The binomial weights sum to 1 and the j = 0, 1 exponents vanish, so
    A − 1 = Σ_{j=2}^{α} C(α,j)(1−q)^{α−j} q^j (e^{(j²−j)/(2z²)} − 1), a sum of non-negative terms.
    """
    a, lead, zr, qr = _gaussian_rows(noise_multiplier, rate, orders)
    jmax = int(a.max())
    j = np.arange(jmax + 1, dtype=np.float64)
    c = _half_inv_square(zr)
    inner = np.clip(qr, 1e-300, 0.5)  # placeholder for q in {0, 1}; those rows are overwritten below
    qs = np.where((qr > 0.0) & (qr < 1.0), qr, inner)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # c = +inf: j < 2 columns reset below
        logit = np.log(qs) - np.log1p(-qs)
        terms = j[None, :] * logit[:, None] + log_expm1(c[:, None] * (j * j - j)[None, :])
        full = log_expm1(c[:, None] * (a * (a - 1.0))[None, :])
    terms[:, :2] = -np.inf
    out = log_binomial_sum(terms, a, 2) + a[None, :] * np.log1p(-qs)[:, None]
    out = np.where((qr == 1.0)[:, None], full, out)
    out = np.where((qr == 0.0)[:, None], -np.inf, out)
    return out.reshape(lead + (a.size,))


def poisson_subsampled_gaussian_rdp(noise_multiplier: Any, rate: Any, orders: Any) -> npt.NDArray[np.float64]:
    """Poisson-subsampled Gaussian, **add/remove** neighbours, noise multiplier z = σ/Δ₂ (exact).

    Mironov, Talwar & Zhang 2019, Section 3.3: integer α via :func:`poisson_subsampled_gaussian_log_am1`,
    fractional α via the two-sided series of :func:`_poisson_gaussian_log_a_frac` (exact up to a rigorous
    truncation bound, so orders in (1, 2) are usable); capped by α/(2z²).
    """
    a = check_orders(orders)
    z = _check_noise("noise_multiplier", noise_multiplier)
    q = _check_rates("rate", rate)
    lead = np.broadcast_shapes(z.shape, q.shape)
    frac = a != np.round(a)
    out = np.empty(lead + (a.size,))
    if np.any(~frac):
        ints = a[~frac]
        out[..., ~frac] = log1p_exp(poisson_subsampled_gaussian_log_am1(z, q, ints)) / (ints - 1.0)
    if np.any(frac):
        zr, qr = _rows(lead, z, q)
        rows = [_poisson_gaussian_log_a_frac(float(zi), float(qi), a[frac]) for zi, qi in zip(zr, qr, strict=True)]
        log_a = np.asarray(rows).reshape(lead + (int(frac.sum()),))
        # log A below 1e-8 carries float64 rounding of the sum (~1e-16 absolute) that may exceed its size;
        # there the cumulant interpolation between integer orders (exact log(A - 1), an upper bound) is used
        out[..., frac] = log_a / (a[frac] - 1.0)
        if np.any(log_a < 1e-8):
            interp = _from_log_am1(a[frac], lambda ints: poisson_subsampled_gaussian_log_am1(z, q, ints))
            out[..., frac] = np.where(log_a < 1e-8, interp, out[..., frac])
    result: npt.NDArray[np.float64] = np.minimum(out, _gaussian_cap(a, z))
    return result


_FRAC_BLOCK = 2048
_FRAC_MAX_TERMS = 1 << 21
_FRAC_REL_TOL = math.log(1e-14)  # stop once the next term is this far below the sum (tightness only)


def _poisson_gaussian_log_a_frac(z: float, q: float, orders: np.ndarray) -> np.ndarray:
    """log A(α) of the Poisson-subsampled Gaussian at fractional α > 1: an upper bound, tight to ~1e-13.

    Mironov, Talwar & Zhang 2019, Sec. 3.3: with z₀ = z²·log(1/q − 1) + 1/2 and Φ the normal cdf,
        A = Σ_{i≥0} C(α,i) (1−q)^{α−i} q^i e^{(i²−i)/(2z²)} Φ((z₀ − i)/z)
          + Σ_{i≥0} C(α,i) q^{α−i} (1−q)^i e^{((α−i)²−(α−i))/(2z²)} Φ((α − i − z₀)/z).
    Truncation (ours): for i > ⌈α⌉ the coefficients C(α,i) alternate in sign with |C(α,i+1)/C(α,i)| =
    (i−α)/(i+1) < 1, and the rest of each term is non-increasing in i (Φ(−x−h) ≤ e^{−xh−h²/2}·Φ(−x) for
    h > 0 makes the ratio of consecutive factors at most 1, by the choice of z₀). Past ⌈α⌉ the series is
    alternating with non-increasing magnitude, so the remainder has the sign of the first omitted term
    and at most its size: adding that term when positive keeps an upper bound.
    """
    c = float(_half_inv_square(np.asarray(z)))
    if q == 0.0:
        return np.zeros(orders.size)
    if q == 1.0 or c > 1e200:  # no subsampling, or z < 7e-101 (c·i² would overflow in the series):
        return np.full(orders.size, np.inf)  # the caller's cap α/(2z²), the unsubsampled value, is the bound
    lq, l1q = math.log(q), math.log1p(-q)
    z0 = z * z * (l1q - lq) + 0.5

    def log_terms(alpha: float, i: np.ndarray) -> npt.NDArray[np.float64]:
        j = alpha - i
        log_coef = gammaln(alpha + 1.0) - gammaln(i + 1.0) - gammaln(j + 1.0)  # gammaln is log|Γ|
        t0 = j * l1q + i * lq + c * (i * i - i) + log_ndtr((z0 - i) / z)
        t1 = j * lq + i * l1q + c * (j * j - j) + log_ndtr((j - z0) / z)
        result: npt.NDArray[np.float64] = log_coef + np.logaddexp(t0, t1)
        return result

    out = np.empty(orders.size)
    for idx, alpha in enumerate(orders):
        pos: list[np.ndarray] = []
        neg: list[np.ndarray] = []
        start = 0
        while True:
            i = np.arange(start, start + _FRAC_BLOCK, dtype=np.float64)
            terms, sign = log_terms(alpha, i), _binom_sign(alpha, i)
            pos.append(terms[sign > 0])
            neg.append(terms[sign < 0])
            start += _FRAC_BLOCK
            nxt = float(log_terms(alpha, np.array([float(start)]))[0])
            past_head = start > math.ceil(alpha) + 1
            if past_head and (nxt - logsumexp(np.concatenate(pos)) < _FRAC_REL_TOL or start >= _FRAC_MAX_TERMS):
                break
        if _binom_sign(alpha, np.array([float(start)]))[0] > 0:
            pos.append(np.array([nxt]))  # remainder bound: the first omitted term, when positive
        lp, ln_ = logsumexp(np.concatenate(pos)), logsumexp(np.concatenate(neg))
        if not ln_ < lp:  # cannot happen for a convergent alternating tail; refuse rather than guess
            raise ParameterError(f"Fractional-order series failed to converge at order {alpha} (z={z}, q={q}).")
        out[idx] = lp + math.log1p(-math.exp(ln_ - lp))
    return out


def _binom_sign(alpha: float, i: np.ndarray) -> np.ndarray:
    """Sign of C(α, i) for fractional α: +1 for i ≤ ⌈α⌉, then alternating."""
    c = math.ceil(alpha)
    return np.where(i <= c, 1.0, np.where((i - c) % 2 == 1, -1.0, 1.0))


# ---------------------------------------------------------------------------------------------------
# Theorem 27 of WBK19: forward differences Δ^ℓ g(0) of g(i) = exp(c·i(i−1)), c = 1/(2z²), even ℓ.
#
# Series (ours): i(i−1) is the falling factorial i^(2), and (i^(2))^r = Σ_p d[r,p] i^(p) with d ≥ 0
# (products of falling factorials expand with non-negative coefficients), so
#     Δ^ℓ g(0) = Σ_r c^r/r! · Δ^ℓ[(i^(2))^r](0) = ℓ! Σ_{r ≥ ℓ/2} c^r d[r,ℓ] / r!,
# a series of non-negative terms: no cancellation, increasing in c, and (evaluating (i^(2))^r at i = ℓ)
# ℓ!·d[r,ℓ] ≤ (ℓ(ℓ−1))^r, so the tail beyond r = R is at most Σ_{s>R} x^s/s!, x = cℓ(ℓ−1); that bound is
# added, so the value returned is never below the true one. d obeys
#     d[r+1,p] = d[r,p−2] + 2(p−1)·d[r,p−1] + p(p−1)·d[r,p]   (i^(p)·i^(2) = i^(p+2) + 2p i^(p+1) + p(p−1) i^(p)).
# The special term is evaluated where c·ℓ ≤ 6 and x ≤ 2100; beyond c·ℓ ≈ 3.6 it never beat the generic
# term 2e^{(j−1)ε(j)} in our checks (z from 0.5 to 500, ℓ ≤ 1026), and omitting it keeps an upper bound.
# ---------------------------------------------------------------------------------------------------

_FD_CL_MAX = 6.0
_FD_X_MAX = 2100.0
_FD_MARGIN = 45.0  # series length: Poisson tail bound e^-45 below the leading term at every column
_FD_GROUP_SPREAD = 30.0  # rows share one BLAS product while R·|log c − log c0| ≤ 30 (no underflow loss)


def _build_fd_series_table(r_max: int, p_max: int) -> npt.NDArray[np.float64]:
    """D[r, m] = log((2m)!·d[r, 2m]/r!) for r = 0..r_max, 2m ≤ p_max (−inf where d = 0)."""
    p = np.arange(p_max + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        l2 = np.where(p >= 2, np.log(2.0 * (p - 1.0)), -np.inf)
        lpp = np.where(p >= 2, np.log(p * (p - 1.0)), -np.inf)
    ld = np.full((r_max + 1, p_max + 1), -np.inf)
    ld[0, 0] = 0.0
    a = np.full(p_max + 1, -np.inf)
    b = np.full(p_max + 1, -np.inf)
    for r in range(r_max):
        prev = ld[r]
        a[2:] = prev[:-2]
        b[1:] = l2[1:] + prev[:-1]
        ld[r + 1] = np.logaddexp(np.logaddexp(a, b), lpp + prev)
    even = np.arange(0, p_max + 1, 2)
    out: npt.NDArray[np.float64] = (
        ld[:, even] + gammaln(even + 1.0)[None, :] - gammaln(np.arange(r_max + 1) + 1.0)[:, None]
    )
    out.setflags(write=False)
    return out


_FD_TABLES: dict[int, np.ndarray] = {}  # p_max -> the largest read-only table built so far (a memo)


def _fd_series_table(r_max: int, p_max: int) -> np.ndarray:
    """A table with more than r_max rows (power-of-two sizes ≥ 512; a larger cached one is reused)."""
    have = _FD_TABLES.get(p_max)
    if have is None or have.shape[0] <= r_max:
        have = _build_fd_series_table(max(512, 1 << r_max.bit_length()), p_max)
        _FD_TABLES[p_max] = have
    return have


def _log_poisson_tail(lx: np.ndarray, x: np.ndarray, r: float) -> np.ndarray:
    """log of an upper bound on Σ_{s>r} x^s/s! (geometric bound, valid when r + 2 > x; else inf)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        val = (r + 1.0) * lx - gammaln(r + 2.0) - np.log1p(-x / (r + 2.0))
    return np.where(x < r + 2.0, val, np.inf)


def _series_length(lc: float, ells: np.ndarray) -> int:
    """Smallest R whose tail bound is e^-45 below the leading term (r = ℓ/2) at every column ℓ."""
    x = math.exp(lc) * ells * (ells - 1.0)
    lx = np.log(x)
    lead = gammaln(ells + 1.0) - gammaln(ells / 2.0 + 1.0) + ells / 2.0 * lc
    lo, hi = int(ells[-1]) // 2, int(ells[-1]) // 2 + int(3.0 * x[-1]) + 200
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if np.all(_log_poisson_tail(lx, x, float(mid)) <= lead - _FD_MARGIN):
            hi = mid
        else:
            lo = mid
    return hi


def _log_even_fd(c: np.ndarray, top: int) -> np.ndarray:
    """log Δ^ℓ g(0) at ℓ = 0, 2, ..., top (columns) for each c (rows); +inf where not evaluated."""
    c = np.asarray(c, dtype=np.float64).ravel()
    m_all = top // 2
    out = np.full((c.size, m_all + 1), np.inf)
    out[:, 0] = 0.0
    if c.size == 0 or m_all == 0:
        return out
    lc = np.log(c)
    lmax = np.minimum(np.floor(_FD_CL_MAX / c), np.floor(0.5 + np.sqrt(0.25 + _FD_X_MAX / c)))
    mcount = np.minimum(lmax // 2, m_all).astype(np.int64)  # evaluated columns ℓ = 2..2·mcount
    order = np.lexsort((-lc, -mcount))  # by column count, then c descending
    order = order[mcount[order] > 0]
    groups = []
    r_table = 0
    i = 0
    while i < order.size:
        first = order[i]
        mg = int(mcount[first])
        rg = _series_length(float(lc[first]), 2.0 * np.arange(1, mg + 1))
        # rows with the same columns and smaller c need no more terms (tail/lead falls with c)
        same = order[i:][mcount[order[i:]] == mg]
        j = i + int(np.searchsorted(-lc[same], -lc[first] + _FD_GROUP_SPREAD / rg, side="right"))
        groups.append((order[i:j], mg, rg))
        r_table = max(r_table, rg)
        i = j
    table = _fd_series_table(r_table, -(-top // 64) * 64)
    for grp, mg, rg in groups:
        ells = 2.0 * np.arange(1, mg + 1)
        r_idx = np.arange(rg + 1, dtype=np.float64)
        l0 = lc[grp[0]]
        wlog = r_idx[:, None] * l0 + table[: rg + 1, 1 : mg + 1]
        wmax = np.max(wlog, axis=0)
        wmat = np.exp(wlog - wmax[None, :])
        emat = np.exp(r_idx[None, :] * (lc[grp] - l0)[:, None])  # ≤ 1, ≥ e^-30
        with np.errstate(divide="ignore"):
            val = wmax[None, :] + np.log(emat @ wmat)
        x = c[grp][:, None] * (ells * (ells - 1.0))[None, :]
        out[grp, 1 : mg + 1] = np.logaddexp(val, _log_poisson_tail(np.log(x), x, float(rg)))
    return out


def wor_subsampled_gaussian_log_am1(noise_multiplier: Any, rate: Any, orders: Any) -> np.ndarray:
    """log(A − 1) of WBK19 Theorem 27: without replacement (γ = m/N), **replace-one**, Gaussian, z = σ/Δ₂.

    Wang, Balle & Kasiviswanathan 2019, Theorem 27: Theorem 9 with the j ≥ 3 terms replaced by
    γ^j C(α,j)·min{4·(Δ^{2⌊j/2⌋}g(0)·Δ^{2⌈j/2⌉}g(0))^{1/2}, 2e^{(j−1)ε(j)}}, g(i) = e^{i(i−1)/(2z²)},
    ε(α) = α/(2z²). Termwise ≤ Theorem 9 on the same Gaussian curve, non-decreasing in γ and in 1/z.
    Integer orders; broadcasts over ``noise_multiplier`` and ``rate`` (forward differences are computed for
    all rows at once by the series above). z is relative to the *replace-one* sensitivity (2C for a sum of
    vectors clipped to C), as in dp-accounting.
    """
    a, lead, zr, gr = _gaussian_rows(noise_multiplier, rate, orders)
    jmax = int(a.max())
    top = jmax + 1 + (jmax + 1) % 2
    c = _half_inv_square(zr)
    # the special term only: c below 1e-300 (z > 7e149, or underflowed to 0) is raised to 1e-300; the term
    # is non-decreasing in c, so this keeps an upper bound and keeps log c and 6/c finite
    uniq, inv = np.unique(np.maximum(c, 1e-300), return_inverse=True)
    fd = _log_even_fd(uniq, top)[inv.ravel()]  # (rows, top/2 + 1), column m ↔ ℓ = 2m
    j = np.arange(jmax + 1)
    jf = j.astype(np.float64)
    with np.errstate(divide="ignore"):
        lg = np.log(gr)[:, None]
    with np.errstate(invalid="ignore", over="ignore"):  # 0·inf at j < 2 (reset below); +inf is a true value
        generic = _LOG2 + (jf - 1.0)[None, :] * jf[None, :] * c[:, None]
        special = _LOG4 + 0.5 * (fd[:, j // 2] + fd[:, (j + 1) // 2])
        terms = _xlogy(jf[None, :], lg) + np.minimum(generic, special)
        terms[:, 2] = _xlogy(np.float64(2.0), lg[:, 0]) + _thm9_second(2.0 * c)
    terms[:, :2] = -np.inf
    terms[gr == 0.0] = -np.inf  # γ = 0 never touches the data
    return log_binomial_sum(terms, a, 2).reshape(lead + (a.size,))


def wor_subsampled_gaussian_rdp(noise_multiplier: Any, rate: Any, orders: Any) -> npt.NDArray[np.float64]:
    """Sampling without replacement (γ = m/N), **replace-one**, Gaussian with z = σ/Δ₂ (Δ₂ replace-one).

    WBK19 Theorem 27 (:func:`wor_subsampled_gaussian_log_am1`), ε'(α) = log A(α)/(α−1), then min with
    ε(α) = α/(2z²). Note z is relative to the *replace-one* sensitivity, as in dp-accounting.
    """
    a = check_orders(orders)
    z = _check_noise("noise_multiplier", noise_multiplier)
    sub = _from_log_am1(a, lambda ints: wor_subsampled_gaussian_log_am1(z, rate, ints))
    result: npt.NDArray[np.float64] = np.minimum(sub, _gaussian_cap(a, z))
    return result


def revealed_participation_rdp(base_rdp: Any, rate: float, orders: Any) -> np.ndarray:
    """RDP when a data-independent participation flag ~ Bernoulli(rate) is visible to the observer:
    eps(a) = 1/(a-1) log(1 + rate expm1((a-1) eps_base(a))).

    Exact for a revealed flag (the Rényi moment of an output (flag, Y) is the flag-weighted sum of the
    moments, 1 for flag = 0); for a hidden flag it is the joint-convexity upper bound (any unit of privacy,
    both directions). Used for the secure-aggregation server, which sees who took part. ``base_rdp`` has
    the orders on its last axis."""
    a = check_orders(orders)
    q = float(rate)
    if not 0.0 <= q <= 1.0:
        raise ParameterError(f"Argument 'rate' must be a probability in [0, 1], not {rate!r}.")
    eps = np.asarray(base_rdp, dtype=np.float64)
    if q == 1.0:
        return eps.copy()
    if q == 0.0:
        return np.zeros_like(eps)
    a1 = a - 1.0
    return np.logaddexp(0.0, math.log(q) + log_expm1(a1 * eps)) / a1
