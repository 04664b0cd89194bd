"""Conversions between Rényi DP and (ε, δ)-DP (one implementation, used by every accountant).

* :func:`rdp_to_dp` / :func:`dp_delta` — the certificate conversion (CKS20 Prop. 12 = LHT22 Lemma 3 =
  LT22 Lemma 2).
* :func:`rdp_to_dp_mironov` — Mironov 2017 Prop. 3, looser; a labelled comparison only (LT22 Table 1
  was computed with the CKS20 form, not this one).
* :func:`pure_dp_to_rdp` / :func:`dp_to_rdp` — ε-DP → RDP (randomized response is the worst case).
* :func:`dp_to_rdp_lemma1` — LHT22 Lemma 1 as printed: **not** an upper bound, never a certificate.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_real
from secagg_dp.accounting.core.rdp import check_orders
from secagg_dp.errors import ParameterError

__all__ = [
    "LargestOrderWarning",
    "rdp_to_dp",
    "rdp_to_dp_mironov",
    "dp_delta",
    "pure_dp_to_rdp",
    "dp_to_rdp",
    "dp_to_rdp_lemma1",
]


class LargestOrderWarning(UserWarning):
    """The optimal Rényi order is the largest one offered: adding larger orders may lower ε."""


def _check_curve(orders: Any, rdp: Any) -> tuple[np.ndarray, np.ndarray]:
    a = check_orders(orders)
    r = np.asarray(rdp, dtype=np.float64)
    if r.shape != a.shape:
        raise ParameterError(f"Argument 'rdp' must have the shape of 'orders' {a.shape}, not {r.shape}.")
    if np.any(np.isnan(r)):
        raise ParameterError("Argument 'rdp' contains NaN.")
    if np.any(r < 0.0):
        raise ParameterError(
            f"Argument 'rdp' must be >= 0 (a Rényi divergence), not {float(r.min())!r}. "
            "A negative value means an upstream numerical error; refusing to certify."
        )
    return a, r


def rdp_to_dp(orders: Any, rdp: Any, delta: float, *, warn: bool = True) -> tuple[float, float]:
    """Smallest ε over the orders such that the RDP curve implies (ε, δ)-DP; returns (ε, optimal order).

    ε = min_α r(α) + log1p(−1/α) − log(δ·α)/(α−1) (Canonne, Kamath & Steinke 2020, Prop. 12; Asoodeh et
    al. 2021), and ε = 0 at any order where δ² ≥ 1 − e^{−r(α)} (Pinsker/Bretagnolle–Huber via KL ≤ D_α).
    Edge cases: δ ≥ 1 gives ε = 0; δ = 0 gives ε = 0 if r ≡ 0, else ε = inf (order inf); negative r is
    refused. Warns :class:`LargestOrderWarning` when the optimum is the largest order offered.
    """
    a, r, d = _check_conversion(orders, rdp, delta)
    if d >= 1.0 or d == 0.0:
        return _trivial_delta(a, r, d)
    with np.errstate(invalid="ignore", over="ignore"):
        eps = r + np.log1p(-1.0 / a) - (math.log(d) + np.log(a)) / (a - 1.0)
        kl_zero = d * d + np.expm1(-r) >= 0.0
    return _best_order(a, np.where(kl_zero, 0.0, eps), warn)


def _check_conversion(orders: Any, rdp: Any, delta: Any) -> tuple[np.ndarray, np.ndarray, float]:
    a, r = _check_curve(orders, rdp)
    if isinstance(delta, bool):
        raise ParameterError(f"Argument 'delta' must be a real number, not {delta!r}.")
    return a, r, check_real("delta", delta, lo=0.0)


def _trivial_delta(a: np.ndarray, r: np.ndarray, d: float) -> tuple[float, float]:
    """δ ≥ 1: ε = 0; δ = 0: ε = 0 if the curve is identically 0, else ε = inf (order inf)."""
    if d >= 1.0:
        return 0.0, float(a[0])
    return (0.0, float(a[0])) if np.all(r == 0.0) else (math.inf, math.inf)


def _best_order(a: np.ndarray, eps: np.ndarray, warn: bool) -> tuple[float, float]:
    """(max(0, min ε), its order); warns :class:`LargestOrderWarning` when that order is the largest offered."""
    i = int(np.argmin(eps))
    e = max(0.0, float(eps[i]))
    if warn and a.size > 1 and math.isfinite(e) and e > 0.0 and a[i] == a.max():
        warnings.warn(
            f"The optimal Rényi order {a[i]:g} is the largest offered; larger orders may give a smaller ε.",
            LargestOrderWarning,
            stacklevel=3,
        )
    return e, float(a[i])


def rdp_to_dp_mironov(orders: Any, rdp: Any, delta: float, *, warn: bool = True) -> tuple[float, float]:
    """Mironov 2017, Proposition 3: ε = min_α r(α) + log(1/δ)/(α−1); returns (ε, optimal order).

    Valid but looser than :func:`rdp_to_dp`; kept as a **labelled comparison** (LT22 Table 1's numbers
    come from the CKS20 form; this one gives ≈ 0.37 there instead of 0.228). Same edge cases and warning.
    """
    a, r, d = _check_conversion(orders, rdp, delta)
    if d >= 1.0 or d == 0.0:
        return _trivial_delta(a, r, d)
    return _best_order(a, r - math.log(d) / (a - 1.0), warn)


def dp_delta(orders: Any, rdp: Any, epsilon: float) -> tuple[float, float]:
    """Smallest δ over the orders such that the RDP curve implies (ε, δ)-DP; returns (δ, optimal order).

    log δ(α) = min{ ½·log(1 − e^{−r}), (α−1)(r − ε + log1p(−1/α)) − log α } (CKS20 Prop. 12 inverted,
    and the KL bound); δ = min(1, e^{min_α log δ(α)}).
    """
    a, r = _check_curve(orders, rdp)
    e = check_real("epsilon", epsilon, lo=0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        kl = np.where(r == 0.0, -np.inf, 0.5 * np.log(-np.expm1(-r)))
        cks = (a - 1.0) * (r - e + np.log1p(-1.0 / a)) - np.log(a)
    cks = np.where(np.isnan(cks), np.inf, cks)
    logd = np.minimum(kl, cks)
    i = int(np.argmin(logd))
    return min(1.0, math.exp(float(logd[i]))), float(a[i])


def pure_dp_to_rdp(epsilon: Any, orders: Any) -> npt.NDArray[np.float64]:
    """RDP curve implied by ε-DP (δ = 0): the randomized-response pair is the worst case.

    Every ε-DP pair is a post-processing of randomized response (Kairouz, Oh & Viswanath 2015, Thm 2.5),
    so by data processing ε(α) = 1/(α−1)·log((e^{αε} + e^{(1−α)ε})/(1 + e^{ε})) ≤ min(ε, αε²/2)
    (= LHT22 Lemma 1 at δ = 0 evaluated at its optimum r = e^ε/(1 + e^ε)). ``epsilon`` may be an
    array: the result has shape ``epsilon.shape + (len(orders),)``.
    """
    a = check_orders(orders)
    if np.ndim(epsilon) == 0:
        e = np.asarray(check_real("epsilon", epsilon, lo=0.0))
    else:
        e = np.asarray(epsilon, dtype=np.float64)
        if not np.all(np.isfinite(e)) or np.any(e < 0.0):
            raise ParameterError(f"Argument 'epsilon' must contain finite values >= 0, not {epsilon!r}.")
    e = e[..., None]
    num = np.logaddexp(a * e, (1.0 - a) * e)
    val = (num - np.logaddexp(0.0, e)) / (a - 1.0)
    out = np.minimum(np.maximum(val, 0.0), e)
    result: npt.NDArray[np.float64] = out if out.ndim > 1 else out.reshape(a.shape)
    return result


def dp_to_rdp(epsilon: float, delta: float, orders: Any) -> np.ndarray:
    """RDP certificate implied by (ε, δ)-DP. Only δ = 0 has one (:func:`pure_dp_to_rdp`).

    For δ > 0 no finite RDP bound exists in general: the mechanism that outputs its input with probability
    δ and ⊥ otherwise is (0, δ)-DP with D_α = ∞. Use :func:`dp_to_rdp_lemma1` only to reproduce LHT22.
    """
    d = check_real("delta", delta, lo=0.0, hi=1.0)
    if d > 0.0:
        raise ParameterError(
            f"Argument 'delta' must be 0 for a DP->RDP certificate, not {d!r}: an (epsilon, delta)-DP "
            "mechanism with delta > 0 can have infinite Renyi divergence. To fix, bound the mechanism's RDP "
            "directly (or use dp_to_rdp_lemma1, which is not a certificate)."
        )
    return pure_dp_to_rdp(epsilon, orders)


def dp_to_rdp_lemma1(epsilon: float, delta: float, orders: Any) -> np.ndarray:
    """LHT22 Lemma 1 as printed — **not an upper bound; never a certificate.**

    ε(λ) = ε + 1/(λ−1)·log min_{r∈(δ,1)} [r^λ (r−δ)^{1−λ} + (1−r)^λ (e^ε − r + δ)^{1−λ}].
    Two independent findings: at δ = 0 the minimum is degenerate (r → 0 gives ε(λ) → 0, far below the
    randomized-response value 0.735 at ε = 1, λ = 2; the lemma's intended value is RR, :func:`pure_dp_to_rdp`),
    and for δ > 0 no finite RDP bound exists at all (:func:`dp_to_rdp`). Kept only to reproduce the paper.
    The minimisation is a bounded 1-D search in log space (the paper calls it convex in r).
    """
    a = check_orders(orders)
    e = check_real("epsilon", epsilon, lo=0.0)
    d = check_real("delta", delta, lo=0.0, hi=1.0, hi_open=True)
    out = np.empty_like(a)
    for i, lam in enumerate(a):

        def log_m(r: float, lam: float = float(lam)) -> float:
            t1 = lam * math.log(r) + (1.0 - lam) * math.log(r - d)
            t2 = lam * math.log1p(-r) + (1.0 - lam) * math.log(math.exp(e) - r + d)
            return float(np.logaddexp(t1, t2))

        span = 1.0 - d
        from scipy.optimize import minimize_scalar  # lazy: scipy.optimize costs ~0.3 s to import

        res = minimize_scalar(
            log_m, bounds=(d + 1e-12 * span, 1.0 - 1e-12 * span), method="bounded", options={"xatol": 1e-12}
        )
        out[i] = e + float(res.fun) / (lam - 1.0)
    return out
