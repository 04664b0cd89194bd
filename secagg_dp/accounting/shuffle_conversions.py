"""Conversions used by the shuffle accountants (kept here until the accountant core exposes them).

* :func:`rdp_to_dp` — seed 003 Lemma 2 / seed 001 Lemma 3 (Canonne–Kamath–Steinke 2020; Balle et al. 2020):
  ε = min_λ ε(λ) + (log(1/δ) + (λ−1)·log(1 − 1/λ) − log λ)/(λ − 1). Valid for any RDP upper bound; applied
  to a lower bound it yields a number that is not a certificate.
* :func:`rdp_to_dp_mironov` — Mironov (2017) Prop. 3, ε = min_λ ε(λ) + log(1/δ)/(λ−1) (for comparison only).
* :func:`dp_to_rdp` — seed 001 Lemma 1 (Asoodeh et al. 2021) at δ = 0 only. As extracted, the lemma reads
  ε(λ) = ε + log M/(λ−1), M = min_{r∈(δ,1)} r^λ(r−δ)^{1−λ} + (1−r)^λ(e^ε−r+δ)^{1−λ}; at δ = 0 the minimum is
  degenerate (r → 0 gives ε(λ) = 0), while the objective at r = e^ε/(1+e^ε) is exactly randomized response,
  the known optimum, so we implement that. For δ > 0 no finite RDP bound exists in general — the pair
  P = (δ, 1−δ), Q = (0, 1) is (0, δ)-DP yet D_λ(P‖Q) = ∞ — so δ is carried separately (δ-approximate RDP),
  a deliberate departure from seed 001 Sec. 3.3.
* :func:`wbk_subsampled_log_moments` — Wang, Balle & Kasiviswanathan (2019) Thm 9 with ε(∞) = ∞ (the form of
  seed 003 Thm 2 / seed 001 Thm 5): log(1 + r²·C(λ,2)·min{4(e^{ε(2)}−1), 2e^{ε(2)}} + Σ_{j≥3} 2 r^j C(λ,j)
  e^{(j−1)ε(j)}), sampling without replacement at rate r, replace-one.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.special import gammaln, logsumexp

from secagg_dp._validate import check_probability, check_real
from secagg_dp.errors import ParameterError

__all__ = [
    "rdp_to_dp",
    "rdp_to_dp_mironov",
    "dp_to_rdp",
    "wbk_subsampled_log_moments",
]


def _prep(orders, rdp, delta):
    o = np.asarray(orders, dtype=np.float64)
    r = np.asarray(rdp, dtype=np.float64)
    if o.shape != r.shape or o.ndim != 1 or o.size == 0:
        raise ParameterError(f"Arguments 'orders' and 'rdp' must be 1-D of equal length, not {o.shape} and {r.shape}.")
    if np.any(o <= 1) or np.any(np.isnan(r)):
        raise ParameterError("Argument 'orders' must be > 1 and 'rdp' must not contain NaN.")
    delta = check_probability("delta", delta, allow_zero=False, allow_one=False)
    return o, r, delta


def _pick(o: np.ndarray, eps: np.ndarray, warn: bool) -> tuple[float, float]:
    i = int(np.argmin(eps))
    if warn and i == o.size - 1 and o.size > 1:
        warnings.warn(
            f"The best order is the largest one offered ({o[i]:g}); a larger max order may give a smaller epsilon.",
            RuntimeWarning,
            stacklevel=3,
        )
    return max(float(eps[i]), 0.0), float(o[i])


def rdp_to_dp(orders, rdp, delta: float, *, warn: bool = False) -> tuple[float, float]:
    """(ε, best order) by seed 003 Lemma 2 = seed 001 Lemma 3 (Canonne–Kamath–Steinke 2020 Prop. 12)."""
    o, r, delta = _prep(orders, rdp, delta)
    eps = r + (math.log(1.0 / delta) + (o - 1.0) * np.log1p(-1.0 / o) - np.log(o)) / (o - 1.0)
    return _pick(o, eps, warn)


def rdp_to_dp_mironov(orders, rdp, delta: float, *, warn: bool = False) -> tuple[float, float]:
    """(ε, best order) by Mironov (2017) Prop. 3: ε(λ) + log(1/δ)/(λ−1)."""
    o, r, delta = _prep(orders, rdp, delta)
    return _pick(o, r + math.log(1.0 / delta) / (o - 1.0), warn)


def dp_to_rdp(eps, orders) -> np.ndarray:
    """RDP of an ε-DP mechanism: seed 001 Lemma 1 at δ = 0 (Asoodeh et al. 2021), attained by randomized response.

    ε(λ) = 1/(λ−1)·log(p^λ q^{1−λ} + q^λ p^{1−λ}), p = e^ε/(1+e^ε), q = 1 − p; broadcast to shape
    eps.shape + (len(orders),). For an (ε, δ)-DP mechanism with δ > 0 the caller must carry δ separately
    (δ-approximate RDP: the mechanism is a post-processing of (ε, δ)-randomized response, which is ε-RR
    outside an event of probability δ); see the module docstring for why Lemma 1 itself is not used there.
    """
    e = np.asarray(eps, dtype=np.float64)[..., None]
    lam = np.asarray(orders, dtype=np.float64)
    if np.any(lam <= 1) or np.any(e < 0) or not np.all(np.isfinite(e)):
        raise ParameterError("dp_to_rdp needs orders > 1 and finite eps >= 0.")
    log_p = -np.logaddexp(0.0, -e)
    log_q = -np.logaddexp(0.0, e)
    a = lam * log_p + (1.0 - lam) * log_q
    b = lam * log_q + (1.0 - lam) * log_p
    return np.maximum(np.logaddexp(a, b) / (lam - 1.0), 0.0)


def _log_binom(n, k):
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def wbk_subsampled_log_moments(base_rdp: np.ndarray, rate) -> np.ndarray:
    """(λ−1)·ε'(λ) for λ = 2..L from base RDP ε(j), j = 2..L (last axis), at sampling rate ``rate``.

    Wang–Balle–Kasiviswanathan 2019 Thm 9 with ε(∞) = ∞ (seed 003 Eq. 16; seed 001 Thm 5, App. A
    ternary-DP bounds), subsampling without replacement, replace-one. ``base_rdp`` may have leading axes;
    ``rate`` broadcasts against them.
    """
    eps = np.asarray(base_rdp, dtype=np.float64)
    r = np.asarray(rate, dtype=np.float64)[..., None]
    if np.any((r < 0) | (r > 1)):
        raise ParameterError(f"Argument 'rate' must lie in [0, 1], not {rate!r}.")
    L = eps.shape[-1] + 1
    j = np.arange(2, L + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_r = np.log(r)
    # j = 2 term: min{4(e^{ε(2)} − 1), 2 e^{ε(2)}}
    e2 = eps[..., 0:1]
    with np.errstate(divide="ignore"):
        log_t2 = np.minimum(math.log(4.0) + np.log(np.expm1(e2)), math.log(2.0) + e2)
    log_tj = math.log(2.0) + (j - 1.0) * eps  # j ≥ 3 entries used; j = 2 slot overwritten below
    log_tj = np.concatenate([np.broadcast_to(log_t2, log_tj[..., :1].shape), log_tj[..., 1:]], axis=-1)
    base_terms = j * log_r + log_tj  # shape (..., L−1) for j = 2..L
    out = np.empty(eps.shape[:-1] + (L - 1,))
    for lam in range(2, L + 1):
        jj = j[: lam - 1]
        t = _log_binom(float(lam), jj) + base_terms[..., : lam - 1]
        out[..., lam - 2] = np.logaddexp(0.0, logsumexp(t, axis=-1))
    return out


def check_delta(name: str, value) -> float:
    return check_real(name, value, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
