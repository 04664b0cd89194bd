"""Closed-form Rényi-DP curves of the additive-noise mechanisms (pure, vectorised functions).

Every function takes an array of orders α > 1 and returns ε(α) with the same shape, an upper bound on
D_α(M(D) || M(D')) for the neighbouring pair whose sensitivities are given. Which neighbouring relation the
sensitivities refer to is the caller's business: the event classes in
:mod:`secagg_dp.accounting.mechanisms` carry it explicitly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import gammaln

from secagg_dp._validate import check_int, check_real
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

#: Default Rényi orders: the integers 2..256 plus 512 and 1024 (all integer, so every subsampling
#: theorem applies exactly).
DEFAULT_ORDERS: np.ndarray = np.concatenate([np.arange(2, 257), [512, 1024]]).astype(np.float64)
DEFAULT_ORDERS.setflags(write=False)

_TAU_EXACT_TERMS = 1_000_000


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


def log_comb(n: Any, k: Any) -> np.ndarray:
    """log C(n, k) via log-gamma (broadcasting, exact to float rounding for n up to ~1e15)."""
    n = np.asarray(n, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def gaussian_rdp(orders: Any, sigma: float, l2_sensitivity: float) -> np.ndarray:
    """ε(α) = α·Δ₂²/(2σ²): Gaussian mechanism N(0, σ²I) (Mironov 2017, Proposition 7; exact)."""
    a = check_orders(orders)
    s = check_real("sigma", sigma, lo=0.0, lo_open=True)
    d = check_real("l2_sensitivity", l2_sensitivity, lo=0.0)
    return a * d * d / (2.0 * s * s)


def discrete_gaussian_rdp(orders: Any, sigma: float, l2_sensitivity: float) -> np.ndarray:
    """ε(α) = α·Δ₂²/(2σ²): one discrete Gaussian N_Z(0, σ²) per coordinate of an integer-valued query.

    Seed 002 Theorem 1 (proved there for sensitivity 1); for integer shifts in d dimensions the bound with
    ‖Δ‖₂ follows from Canonne, Kamath & Steinke 2020, Proposition 5 (equality when (α−1)Δ is integral).
    """
    return gaussian_rdp(orders, sigma, l2_sensitivity)


def ddg_tau(n_clients: int, sigma: float) -> float:
    """τ = 10·Σ_{k=1}^{n−1} exp(−2π²σ²·k/(k+1)) (Kairouz, Liu & Steinke 2021, Theorem 1 / Prop. 14).

    For n − 1 > 10⁶ the first 10⁶ terms are summed exactly and each remaining term is bounded by its limit
    exp(−2π²σ²) (the terms increase in k), so the returned τ is never smaller than the true one.
    """
    n = check_int("n_clients", n_clients, lo=1)
    s = check_real("sigma", sigma, lo=0.0, lo_open=True)
    if n == 1:
        return 0.0
    m = min(n - 1, _TAU_EXACT_TERMS)
    k = np.arange(1, m + 1, dtype=np.float64)
    c = 2.0 * math.pi**2 * s * s
    total = float(np.sum(np.exp(-c * k / (k + 1.0))))
    if n - 1 > m:
        total += (n - 1 - m) * math.exp(-c)
    return 10.0 * total


def ddg_rdp(
    orders: Any,
    n_clients: int,
    sigma: float,
    dim: int,
    l2_sensitivity: float,
    l1_sensitivity: float,
) -> np.ndarray:
    """Distributed discrete Gaussian: n clients each add N_Z(0, σ²)^d; integer shift with norms Δ₂, Δ₁.

    ε(α) = min{ αΔ₂²/(2nσ²) + τd,  (α/2)(Δ₂²/(nσ²) + 2τΔ₁/(√n σ) + τ²d),  (α/2)(Δ₂/(√n σ) + τ√d)² }
    with τ from :func:`ddg_tau` (Kairouz, Liu & Steinke 2021, Proposition 14 with Theorem 1).
    The sum of discrete Gaussians is *not* a discrete Gaussian (seed 002 Lemma 1 is inexact); τ pays for it.
    """
    a = check_orders(orders)
    n = check_int("n_clients", n_clients, lo=1)
    s = check_real("sigma", sigma, lo=0.0, lo_open=True)
    d = check_int("dim", dim, lo=1)
    l2 = check_real("l2_sensitivity", l2_sensitivity, lo=0.0)
    l1 = check_real("l1_sensitivity", l1_sensitivity, lo=0.0)
    tau = ddg_tau(n, s)
    l2s = l2 / (math.sqrt(n) * s)
    l1s = l1 / (math.sqrt(n) * s)
    t1 = a * l2s * l2s / 2.0 + tau * d
    t2 = a / 2.0 * (l2s * l2s + 2.0 * l1s * tau + tau * tau * d)
    t3 = a / 2.0 * (l2s + math.sqrt(d) * tau) ** 2
    return np.minimum(np.minimum(t1, t2), t3)


def skellam_rdp(orders: Any, variance: float, l2_sensitivity: float, l1_sensitivity: float) -> np.ndarray:
    """Multidimensional Skellam Sk(μ/2, μ/2)^d (total variance μ per coordinate), integer shift Δ₂, Δ₁.

    ε(α) = αΔ₂²/(2μ) + min{((2α−1)Δ₂² + 6Δ₁)/(4μ²), 3Δ₁/(2μ)}
    (Agarwal, Kairouz & Liu 2021, Theorem 3.5 as implemented in their accounting code). Skellam is
    infinitely divisible, so n clients of variance v each give μ = n·v exactly.
    """
    a = check_orders(orders)
    mu = check_real("variance", variance, lo=0.0, lo_open=True)
    l2 = check_real("l2_sensitivity", l2_sensitivity, lo=0.0)
    l1 = check_real("l1_sensitivity", l1_sensitivity, lo=0.0)
    extra = np.minimum(((2.0 * a - 1.0) * l2 * l2 + 6.0 * l1) / (4.0 * mu * mu), 3.0 * l1 / (2.0 * mu))
    return a * l2 * l2 / (2.0 * mu) + extra
