"""Privacy amplification by subsampling for Rényi DP, in log space and broadcasting over batch axes.

Conventions shared by every function here:

* ``orders`` is a 1-D array of orders α > 1. The theorems are stated for integer α; a fractional α is
  handled by linear interpolation of the cumulant K(α) = (α−1)ε(α) between ⌊α⌋ and ⌈α⌉ (K is convex in
  α and K(1) = 0, so the interpolation is an upper bound; Wang, Balle & Kasiviswanathan 2019, Cor. 10).
* ``rate`` (and ``noise_multiplier``) broadcast against the leading axes; ``base_rdp_int[..., j]`` is the
  base mechanism's RDP at the integer order j for j = 0..J−1 (entries j < 2 are ignored). The result has
  shape ``broadcast(leading axes) + (len(orders),)``.
* Every result is capped by the unsubsampled RDP (subsampling never hurts; the general theorems alone have
  a noise-independent floor).
* All sums are log-sum-exp; orders up to 1024 (and beyond) give no overflow, underflow or NaN.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import logsumexp

from secagg_dp.accounting.rdp import check_orders, log_comb
from secagg_dp.errors import ParameterError

__all__ = [
    "integer_rdp_table",
    "wor_subsampled_rdp",
    "wor_subsampled_gaussian_rdp",
    "poisson_subsampled_gaussian_rdp",
    "poisson_subsampled_rdp",
]

_LOG2 = math.log(2.0)
_LOG3 = math.log(3.0)
_LOG4 = math.log(4.0)
# Below this noise multiplier the forward differences of Theorem 27 are computed by signed log-space
# differencing (accurate there: the largest term dominates); above it by a cancellation-free integral.
_FD_QUADRATURE_MIN_Z = 2.0


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


def _check_noise(name: str, z: Any) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    if not np.all(np.isfinite(z)) or np.any(z <= 0.0):
        raise ParameterError(f"Argument '{name}' must contain finite values > 0, not {z!r}.")
    return z


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


def _xlogy(k: np.ndarray, logy: np.ndarray) -> np.ndarray:
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


def wor_subsampled_rdp(base_rdp_int: Any, rate: Any, orders: Any) -> np.ndarray:
    """Sampling a fixed-size subset without replacement (rate γ = m/N), **replace-one** neighbours.

    Wang, Balle & Kasiviswanathan 2019, Theorem 9 (without the optional ε(∞) refinement):
    ε'(α) ≤ 1/(α−1)·log(1 + γ²C(α,2)·min{4(e^{ε(2)}−1), 2e^{ε(2)}} + Σ_{j=3}^{α} 2γ^j C(α,j) e^{(j−1)ε(j)}),
    then min with ε(α).
    """
    a = check_orders(orders)
    t = _check_table(base_rdp_int, a)
    g = _check_rates("rate", rate)
    lead = np.broadcast_shapes(t.shape[:-1], g.shape)
    t = np.broadcast_to(t, lead + t.shape[-1:])
    with np.errstate(divide="ignore"):
        lg = np.log(np.broadcast_to(g, lead))[..., None]
    e2 = t[..., 2]
    with np.errstate(over="ignore", divide="ignore"):
        log_em1 = np.where(e2 > 1.0, e2 + np.log1p(-np.exp(-e2)), np.log(np.expm1(e2)))
    second = np.minimum(_LOG4 + log_em1, _LOG2 + e2)

    def log_a(alpha: int) -> np.ndarray:
        j = np.arange(2, alpha + 1, dtype=np.float64)
        terms = _xlogy(j, lg) + log_comb(alpha, j)
        with np.errstate(invalid="ignore"):
            body = _LOG2 + (j - 1.0) * t[..., 2 : alpha + 1]
        body = body.copy()
        body[..., 0] = second
        terms = terms + body
        full = np.concatenate([np.zeros(lead + (1,)), terms], axis=-1)
        return logsumexp(full, axis=-1)

    sub = _assemble(a, lead, log_a)
    return np.minimum(sub, _base_at(t, a))


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

    def log_a(alpha: int) -> np.ndarray:
        head = _xlogy(np.float64(alpha - 1), l1g) + np.log1p((alpha - 1) * gb)
        j = np.arange(2, alpha + 1, dtype=np.float64)
        coef = np.where(j == 2, 0.0, _LOG3)
        terms = coef + log_comb(alpha, j) + _xlogy(j, lg) + _xlogy(alpha - j, l1g)
        with np.errstate(invalid="ignore"):
            terms = terms + (j - 1.0) * t[..., 2 : alpha + 1]
        return logsumexp(np.concatenate([head, terms], axis=-1), axis=-1)

    sub = _assemble(a, lead, log_a)
    return np.minimum(sub, _base_at(t, a))


def poisson_subsampled_gaussian_rdp(noise_multiplier: Any, rate: Any, orders: Any) -> np.ndarray:
    """Poisson-subsampled Gaussian, **add/remove** neighbours, noise multiplier z = σ/Δ₂ (exact).

    Mironov, Talwar & Zhang 2019, Section 3.3 (integer α):
    ε(α) = 1/(α−1)·log Σ_{k=0}^{α} C(α,k)(1−q)^{α−k} q^k exp((k²−k)/(2z²)).
    Fractional α: cumulant interpolation (an upper bound; MTZ19's exact fractional series is not used).
    """
    a = check_orders(orders)
    z = _check_noise("noise_multiplier", noise_multiplier)
    q = _check_rates("rate", rate)
    lead = np.broadcast_shapes(z.shape, q.shape)
    zb = np.broadcast_to(z, lead)[..., None]
    qb = np.broadcast_to(q, lead)[..., None]
    with np.errstate(divide="ignore"):
        lq = np.log(qb)
        l1q = np.log1p(-qb)

    def log_a(alpha: int) -> np.ndarray:
        k = np.arange(0, alpha + 1, dtype=np.float64)
        terms = log_comb(alpha, k) + _xlogy(k, lq) + _xlogy(alpha - k, l1q) + (k * k - k) / (2.0 * zb * zb)
        return logsumexp(terms, axis=-1)

    sub = _assemble(a, lead, log_a)
    return np.minimum(sub, a / (2.0 * zb * zb))


# ---------------------------------------------------------------------------------------------------
# Theorem 27 of WBK19: forward differences of g(m) = exp(m(m−1)/(2z²)) at 0, even orders only.
# ---------------------------------------------------------------------------------------------------


def _log_even_fd_recursion(z: float, top: int) -> np.ndarray:
    """log Δ^ℓ g(0) for ℓ = 0..top by repeated signed log-space differencing (small z only)."""
    c = 1.0 / (2.0 * z * z)
    i = np.arange(top + 1, dtype=np.float64)
    mag = c * i * (i - 1.0)
    pos = np.ones(top + 1, dtype=bool)
    out = np.full(top + 1, np.nan)
    out[0] = 0.0
    for ell in range(1, top + 1):
        # new[i] = old[i+1] − old[i]
        a_m, a_s = mag[1:], pos[1:]
        b_m, b_s = mag[:-1], ~pos[:-1]
        hi = np.maximum(a_m, b_m)
        lo = np.minimum(a_m, b_m)
        hi_s = np.where(a_m >= b_m, a_s, b_s)
        same = a_s == b_s
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.exp(lo - hi)
            m = np.where(same, hi + np.log1p(d), hi + np.log1p(-d))
        m = np.where(np.isneginf(hi), -np.inf, m)
        mag, pos = m, hi_s
        if ell % 2 == 0:
            # Δ^{2m} g(0) > 0 in exact arithmetic; a non-positive result means cancellation ruined it,
            # so fall back to +inf (the min in Theorem 27 then picks the generic term).
            ok = pos[0] and np.isfinite(mag[0])
            out[ell] = mag[0] if ok else np.inf
    return out


def _log_even_fd_quadrature(z: float, top: int) -> np.ndarray:
    """log Δ^ℓ g(0) for even ℓ via Δ^ℓ g(0) = E[e^{−c/4 − Z/(2z)}(e^{Z/z} − 1)^ℓ], Z ~ N(0, 1).

    (g(x) = e^{−c/4}E[e^{(x−1/2)Z/z}], c = 1/(2z²).) Every integrand is non-negative for even ℓ, so the
    trapezoid sum in log space has no cancellation; step 0.05 on a range covering every peak.
    """
    s = 1.0 / z
    c = 0.5 * s * s
    h = 0.05
    lo = -(math.sqrt(2.0 * top) + 40.0)
    hi = top * s + math.sqrt(2.0 * top) + 40.0
    tt = np.arange(lo, hi, h)
    st = s * tt
    big = st > 30.0
    with np.errstate(divide="ignore"):
        lg = np.log(np.abs(np.expm1(np.where(big, 0.0, st))))
    lg[big] = st[big] + np.log1p(-np.exp(-st[big]))
    base = -c / 4.0 - st / 2.0 - tt * tt / 2.0 - 0.5 * math.log(2.0 * math.pi) + math.log(h)
    out = np.full(top + 1, np.nan)
    out[0] = 0.0
    ells = np.arange(2, top + 1, 2)
    for i in range(0, ells.size, 32):
        ch = ells[i : i + 32].astype(np.float64)
        with np.errstate(invalid="ignore"):
            vals = base[None, :] + np.where(np.isneginf(lg)[None, :], -np.inf, ch[:, None] * lg[None, :])
        out[ells[i : i + 32]] = logsumexp(vals, axis=1)
    return out


@functools.lru_cache(maxsize=64)
def _log_even_fd(z: float, top: int) -> np.ndarray:
    arr = _log_even_fd_recursion(z, top) if z < _FD_QUADRATURE_MIN_Z else _log_even_fd_quadrature(z, top)
    arr.setflags(write=False)
    return arr


def wor_subsampled_gaussian_rdp(noise_multiplier: Any, rate: Any, orders: Any) -> np.ndarray:
    """Sampling without replacement (γ = m/N), **replace-one**, Gaussian with z = σ/Δ₂ (Δ₂ replace-one).

    Wang, Balle & Kasiviswanathan 2019, Theorem 27: Theorem 9 with the j ≥ 3 terms replaced by
    γ^j C(α,j)·min{4·(Δ^{2⌊j/2⌋}g(0)·Δ^{2⌈j/2⌉}g(0))^{1/2}, 2e^{(j−1)ε(j)}}, g(m) = e^{m(m−1)/(2z²)},
    ε(α) = α/(2z²); then min with ε(α). Note z is relative to the *replace-one* sensitivity (2C for a sum
    of vectors clipped to C), as in dp-accounting.
    """
    a = check_orders(orders)
    z = _check_noise("noise_multiplier", noise_multiplier)
    g = _check_rates("rate", rate)
    lead = np.broadcast_shapes(z.shape, g.shape)
    zb = np.broadcast_to(z, lead)
    gb = np.broadcast_to(g, lead)[..., None]
    top = int(math.ceil(float(a.max()))) + 1
    top += top % 2
    uniq, inv = np.unique(zb.ravel(), return_inverse=True)
    fd = np.stack([_log_even_fd(float(u), top) for u in uniq])[inv.reshape(lead)]
    zc = zb[..., None]
    with np.errstate(divide="ignore"):
        lg = np.log(gb)
    e2 = 1.0 / (zc * zc)
    with np.errstate(over="ignore"):
        log_em1 = np.where(e2 > 1.0, e2 + np.log1p(-np.exp(-e2)), np.log(np.expm1(e2)))
    second = np.minimum(_LOG4 + log_em1, _LOG2 + e2)

    def log_a(alpha: int) -> np.ndarray:
        j = np.arange(2, alpha + 1)
        jf = j.astype(np.float64)
        generic = _LOG2 + (jf - 1.0) * jf / (2.0 * zc * zc)
        lo_idx = 2 * (j // 2)
        hi_idx = 2 * ((j + 1) // 2)
        special = _LOG4 + 0.5 * (fd[..., lo_idx] + fd[..., hi_idx])
        body = np.minimum(generic, special)
        body[..., 0] = second[..., 0]
        terms = _xlogy(jf, lg) + log_comb(alpha, jf) + body
        full = np.concatenate([np.zeros(lead + (1,)), terms], axis=-1)
        return logsumexp(full, axis=-1)

    sub = _assemble(a, lead, log_a)
    return np.minimum(sub, a / (2.0 * zc * zc))
