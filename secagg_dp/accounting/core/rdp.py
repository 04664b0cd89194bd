"""Closed-form Rényi-DP curves of the additive-noise mechanisms (pure, vectorised functions).

Every function takes an array of orders α > 1 and returns ε(α) with the same shape, an upper bound on
D_α(M(D) || M(D')) for the neighbouring pair whose sensitivities are given. Which neighbouring relation the
sensitivities refer to is the caller's business: the event classes in
:mod:`secagg_dp.accounting.core.events` carry it explicitly.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.logspace import log_comb
from secagg_dp.errors import ParameterError

__all__ = [
    "DEFAULT_ORDERS",
    "check_orders",
    "log_comb",
    "gaussian_rdp",
    "discrete_gaussian_rdp",
    "ddg_tau",
    "ddg_rdp",
    "skellam_rdp",
]

DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [np.arange(11, 20) / 10.0, np.arange(2, 257), np.arange(2.5, 11.0), [512, 1024]]
).astype(np.float64)
"""Default Rényi orders of the core accountant: 1.1..1.9 (small-noise regimes need orders near 1), 2..256,
half-integers 2.5..10.5, 512 and 1024. Not sorted by value; nothing here relies on order. The check-in accountant,
whose subsampling bounds need integer orders, has its own grid (``checkin.CHECKIN_ORDERS``)."""
DEFAULT_ORDERS.setflags(write=False)

_TAU_EXACT_TERMS = 1 << 20
_U = 2.0**-52


def _check_positive(name: str, value: Any, *, allow_zero: bool = False) -> np.ndarray:
    """``value`` (scalar or array) as float64 with every entry finite and > 0 (>= 0 if allowed)."""
    if isinstance(value, bool):
        raise ParameterError(f"Argument '{name}' must be a real number, not {value!r}.")
    if np.ndim(value) == 0:
        return np.asarray(check_real(name, value, lo=0.0, lo_open=not allow_zero))
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf":
        raise ParameterError(f"Argument '{name}' must be a real numeric array, not dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr) | ((arr < 0.0) if allow_zero else (arr <= 0.0))
    if np.any(bad):
        raise ParameterError(
            f"Argument '{name}' must contain finite values {'>=' if allow_zero else '>'} 0, not {arr[bad][0]!r}."
        )
    return arr


def check_orders(orders: Any, *, name: str = "orders") -> np.ndarray:
    """Return ``orders`` as a 1-D float64 array of finite orders > 1 (sorted order not required)."""
    arr = np.atleast_1d(np.asarray(orders))
    if arr.dtype.kind not in "iuf":
        raise ParameterError(f"Argument '{name}' must be a real numeric array, not dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ParameterError(f"Argument '{name}' must be a non-empty 1-D array, not shape {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 1.0):
        bad = arr[~(np.isfinite(arr) & (arr > 1.0))][0]
        raise ParameterError(f"Argument '{name}' must contain finite orders > 1, not {bad!r}.")
    return arr


def gaussian_rdp(orders: Any, sigma: Any, l2_sensitivity: float) -> np.ndarray:
    """ε(α) = α·Δ₂²/(2σ²): Gaussian mechanism N(0, σ²I) (Mironov 2017, Proposition 7; exact).

    ``sigma`` may be an array (e.g. the total noise of k clients for many k): the result then has shape
    ``sigma.shape + (len(orders),)``.
    """
    a = check_orders(orders)
    s = _check_positive("sigma", sigma)[..., None]
    d = check_real("l2_sensitivity", l2_sensitivity, lo=0.0)
    with np.errstate(over="ignore"):
        # (Δ/σ)² rather than Δ²/(2σ²): σ² underflows to a subnormal or 0 for σ < 1e-154 (lost precision,
        # then a division by 0); (Δ/σ)² overflows to +inf only when the true value exceeds 1.8e308.
        out = a * (d / s) ** 2 / 2.0
    return out if out.ndim > 1 else out.reshape(a.shape)


def discrete_gaussian_rdp(orders: Any, sigma: float, l2_sensitivity: float) -> np.ndarray:
    """ε(α) = α·Δ₂²/(2σ²): one discrete Gaussian N_Z(0, σ²) per coordinate of an integer-valued query.

    WJ20 Theorem 1 (proved there for sensitivity 1); for integer shifts in d dimensions the bound with
    ‖Δ‖₂ follows from Canonne, Kamath & Steinke 2020, Proposition 5 (equality when (α−1)Δ is integral).
    """
    return gaussian_rdp(orders, sigma, l2_sensitivity)


@functools.lru_cache(maxsize=16)
def _tau_prefix(sigma: float, size: int) -> np.ndarray:
    """P[k] = Σ_{i=1}^{k−1} exp(−2π²σ²·i/(i+1)) for k = 0..size (float64 cumulative sum, not rounded up)."""
    c = 2.0 * math.pi**2 * sigma * sigma  # +inf for sigma > 1e153: every term is then exactly 0
    i = np.arange(1, size, dtype=np.float64)
    out = np.zeros(size + 1)
    with np.errstate(over="ignore"):
        out[2:] = np.cumsum(np.exp(-c * i / (i + 1.0)))
    out.setflags(write=False)
    return out


def ddg_tau(n_clients: Any, sigma: float) -> Any:
    """τ_n = 10·Σ_{k=1}^{n−1} exp(−2π²σ²·k/(k+1)) (Kairouz, Liu & Steinke 2021, Theorem 1 / Prop. 14).

    Vectorised over ``n_clients`` (an int gives a float); an upper bound that is never below the true τ
    and never overflows. The terms *decrease* in k towards e^{−2π²σ²} (= e^{−c}). Terms k < 2^20 are
    summed exactly (the float sum is rounded up by its error bound (k+1)·2^−52); beyond, with m = k + 1 and
    e^y ≤ 1 + y·e^y, each term is e^{−c}·e^{c/m} ≤ e^{−c}(1 + (c/m)e^{c/(M+1)}), so the tail is at most
    e^{−c}(n − M) + c·e^{−c·M/(M+1)}·log(n/M), evaluated in log space (M = 2^20).
    """
    scalar = np.ndim(n_clients) == 0
    if scalar:
        n = np.array([float(check_int("n_clients", n_clients, lo=1))])
    else:
        n = np.asarray(n_clients, dtype=np.float64)
        if np.any(~np.isfinite(n)) or np.any(n < 1) or np.any(n != np.round(n)):
            raise ParameterError(f"Argument 'n_clients' must contain integers >= 1, not {n_clients!r}.")
    s = check_real("sigma", sigma, lo=0.0, lo_open=True)
    c = 2.0 * math.pi**2 * s * s
    m_cut = _TAU_EXACT_TERMS
    need = int(min(n.max(), m_cut)) if n.size else 1
    size = 1 << max(need - 1, 1).bit_length()
    prefix = _tau_prefix(s, min(size, m_cut))
    k = np.minimum(n, m_cut).astype(np.int64)
    total = prefix[k] * (1.0 + (k + 1.0) * _U)
    big = n > m_cut
    if np.any(big):
        nb = n[big]
        with np.errstate(divide="ignore"):
            first = np.exp(-c + np.log(nb - m_cut))
            # c may underflow to 0 (log c = -inf, term 0); c = +inf makes the term c·e^{-c·M/(M+1)} → 0
            second = (
                0.0 if math.isinf(c) else np.exp(np.log(c) - c * m_cut / (m_cut + 1.0) + np.log(np.log(nb / m_cut)))
            )
        total[big] += (first + second) * (1.0 + 4.0 * _U)
    tau = 10.0 * total * (1.0 + _U)
    # an underflowed τ > 0 is reported as the smallest positive float (still an upper bound)
    tau = np.where(n >= 2, np.maximum(tau, np.nextafter(0.0, 1.0)), 0.0)
    return float(tau[0]) if scalar else tau


def ddg_rdp(
    orders: Any,
    n_clients: Any,
    sigma: float,
    dim: int,
    l2_sensitivity: float,
    l1_sensitivity: float,
    *,
    tau: Any = None,
) -> npt.NDArray[np.float64]:
    """Distributed discrete Gaussian: n clients each add N_Z(0, σ²)^d; integer shift with norms Δ₂, Δ₁.

    ε(α) = min{ αΔ₂²/(2nσ²) + τd,  (α/2)(Δ₂²/(nσ²) + 2τΔ₁/(√n σ) + τ²d),  (α/2)(Δ₂/(√n σ) + τ√d)² }
    with τ from :func:`ddg_tau` (Kairouz, Liu & Steinke 2021, Proposition 14 with Theorem 1), evaluated at
    integer orders; fractional orders by :func:`_fractional_by_interpolation`.
    The sum of discrete Gaussians is *not* a discrete Gaussian (WJ20 Lemma 1 is inexact); τ pays for it.
    ``n_clients`` may be an array (result shape ``n.shape + (len(orders),)``). Every branch is
    non-increasing in n and non-decreasing in τ, so ``tau`` ≥ τ_n (e.g. τ of a larger client count, for a
    block of client counts) still gives an upper bound; default ``ddg_tau(n_clients, sigma)``.
    """
    a = check_orders(orders)
    if np.any(a != np.round(a)):
        return _fractional_by_interpolation(
            a, lambda ints: ddg_rdp(ints, n_clients, sigma, dim, l2_sensitivity, l1_sensitivity, tau=tau)
        )
    if np.ndim(n_clients) == 0:
        n = np.asarray(float(check_int("n_clients", n_clients, lo=1)))
    else:
        n = _check_positive("n_clients", n_clients)
    s = check_real("sigma", sigma, lo=0.0, lo_open=True)
    d = check_int("dim", dim, lo=1)
    l2 = check_real("l2_sensitivity", l2_sensitivity, lo=0.0)
    l1 = check_real("l1_sensitivity", l1_sensitivity, lo=0.0)
    t = np.asarray(ddg_tau(n if n.ndim else int(n), s) if tau is None else _check_positive("tau", tau, allow_zero=True))
    t = np.broadcast_to(t, n.shape)[..., None]
    with np.errstate(over="ignore"):  # Δ/(√n σ) overflows to +inf only when ε really exceeds 1.8e308
        l2s = (l2 / np.sqrt(n) / s)[..., None]
        l1s = (l1 / np.sqrt(n) / s)[..., None]
        t1 = a * l2s * l2s / 2.0 + t * d
        t2 = a / 2.0 * (l2s * l2s + 2.0 * l1s * t + t * t * d)
        t3 = a / 2.0 * (l2s + math.sqrt(d) * t) ** 2
    out = np.minimum(np.minimum(t1, t2), t3)
    result: npt.NDArray[np.float64] = out if n.ndim else out.reshape(a.shape)
    return result


def skellam_rdp(orders: Any, variance: Any, l2_sensitivity: float, l1_sensitivity: float) -> np.ndarray:
    """Multidimensional Skellam Sk(μ/2, μ/2)^d (total variance μ per coordinate), integer shift Δ₂, Δ₁.

    ε(α) = αΔ₂²/(2μ) + min{((2α−1)Δ₂² + 6Δ₁)/(4μ²), 3Δ₁/(2μ)}
    (Agarwal, Kairouz & Liu 2021, Theorem 3.5 as implemented in their accounting code), evaluated at
    integer orders; fractional orders by :func:`_fractional_by_interpolation`. Skellam is
    infinitely divisible, so n clients of variance v each give μ = n·v exactly. ``variance`` may be an
    array (result shape ``variance.shape + (len(orders),)``); ε is non-increasing in μ.
    """
    a = check_orders(orders)
    if np.any(a != np.round(a)):
        return _fractional_by_interpolation(a, lambda ints: skellam_rdp(ints, variance, l2_sensitivity, l1_sensitivity))
    mu = _check_positive("variance", variance)[..., None]
    l2 = check_real("l2_sensitivity", l2_sensitivity, lo=0.0)
    l1 = check_real("l1_sensitivity", l1_sensitivity, lo=0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        inv = 1.0 / mu  # inf only when μ is subnormal: then every term is +inf, an upper bound
        extra = np.minimum(((2.0 * a - 1.0) * l2 * l2 + 6.0 * l1) * inv * inv / 4.0, 1.5 * l1 * inv)
        out = a * l2 * l2 * inv / 2.0 + extra
    out = np.where(np.isnan(out), np.inf, out)  # 0·inf only when a sensitivity is 0 and μ underflows
    return out if out.ndim > 1 else out.reshape(a.shape)


def _fractional_by_interpolation(orders: np.ndarray, at_integers: Any) -> np.ndarray:
    """ε at any orders from a bound evaluated at integer orders only (ours, a deliberate choice).

    The cumulant K(α) = (α−1)·D_α is convex in α with K(1) = 0 (van Erven & Harremoës 2014), so
    K(α) ≤ (1−t)·K(⌊α⌋) + t·K(⌈α⌉) for α = ⌊α⌋ + t: an upper bound from upper bounds at the two integers,
    whether or not the integer-order theorem's proof covers fractional α.
    """
    return interpolate_cumulant(orders, lambda ints: (ints - 1.0) * np.asarray(at_integers(ints), dtype=np.float64))


def interpolate_cumulant(orders: np.ndarray, cumulant_at: Any) -> np.ndarray:
    """ε at every order from the cumulant K(j) = (j−1)ε(j) at the integer orders j ≥ 2 it needs.

    ``cumulant_at(ints)`` gets the float array of those integers and returns K with the orders on its last
    axis; fractional orders interpolate K linearly between ⌊α⌋ and ⌈α⌉ with K(1) = 0 (an upper bound by
    convexity, see :func:`_fractional_by_interpolation`); integer orders take K as it is.
    """
    lo, hi = np.floor(orders), np.ceil(orders)
    ints = np.unique(np.concatenate([lo, hi]))
    ints = ints[ints >= 2]
    k_int = np.asarray(cumulant_at(ints), dtype=np.float64)
    lead = k_int.shape[:-1]
    table = np.zeros(lead + (int(ints.max()) + 1,))
    table[..., ints.astype(np.int64)] = k_int  # K(1) = 0
    t = orders - lo
    k_lo, k_hi = table[..., lo.astype(np.int64)], table[..., hi.astype(np.int64)]
    with np.errstate(invalid="ignore"):  # 0 * inf at integer orders (t = 0) is replaced just below
        k = np.where(t == 0.0, k_lo, (1.0 - t) * k_lo + t * k_hi)
    return k / (orders - 1.0)
