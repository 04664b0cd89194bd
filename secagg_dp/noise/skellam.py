"""The symmetric Skellam distribution Sk(v): the difference of two independent Poisson(v/2) variables.

Mean 0, variance v, P(k) = e^{−v} I_{|k|}(v) with I the modified Bessel function of the first kind
(Skellam, J. R. Stat. Soc. 109(3), 1946; used for distributed DP by Agarwal, Kairouz & Liu, "The Skellam
Mechanism for Differentially Private Federated Learning", NeurIPS 2021). Sums of independent Skellam
variables are Skellam with the variances added, which is why it suits distributed noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from secagg_dp.noise._checks import check_integer_points, check_size, check_variance
from secagg_dp.rng import resolve_rng

__all__ = ["sample_skellam", "skellam_pmf", "skellam_logpmf"]


def sample_skellam(
    variance: float, size: int | tuple[int, ...], *, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Draw ``size`` samples of Sk(v) = Poisson(v/2) − Poisson(v/2) (int64), v = ``variance`` in (0, 1e12].

    Uses numpy's Poisson sampler (inversion for small means, PTRS rejection, Hörmann 1993, for means
    ≥ 10), which computes with float64; like the fast discrete Gaussian path it is exact only up to
    double-precision rounding.

    ``rng=None`` means a fresh AES-CTR generator seeded from OS entropy (:func:`secagg_dp.rng.resolve_rng`);
    pass a seeded ``np.random.Generator`` for reproducibility.

    Raises:
        ParameterError: ``variance`` not a finite real in (0, 1e12], or ``size`` invalid.
        TypeError: ``rng`` is neither ``None`` nor a ``np.random.Generator``.
    """
    variance = check_variance(variance)
    shape = check_size(size)
    gen = resolve_rng(rng)
    lam = 0.5 * variance
    out = gen.poisson(lam, shape).astype(np.int64, copy=False)
    out -= gen.poisson(lam, shape).astype(np.int64, copy=False)
    return out


def skellam_pmf(x: Any, variance: float) -> np.ndarray | np.float64:
    """P(k) = e^{−v} I_{|k|}(v) of Sk(v) at integer-valued ``x`` (vectorised), v = ``variance`` in (0, 1e12].

    For v < 1e4: ``scipy.special.ive(|k|, v)`` (the exponentially scaled Bessel function, AMOS library),
    which avoids overflow of I and cancellation with e^{−v}. For v ≥ 1e4 AMOS loses accuracy (relative
    errors up to ~1e-11 measured against mpmath at v = 1e8) and returns NaN beyond v ≈ 2e9, so there the
    pmf is exp of :func:`skellam_logpmf` (Debye expansion, measured relative error < 1e-14). Values below
    the smallest double underflow to 0; use :func:`skellam_logpmf` in the far tail.
    """
    variance = check_variance(variance)
    k = np.abs(check_integer_points("x", x))
    if variance < _DEBYE_MIN_VARIANCE:
        from scipy import special  # lazy: not needed to sample, only for the pmf

        out = np.asarray(special.ive(k, variance))
    else:
        out = np.exp(_log_ive_debye(k, variance))
    return out[()] if out.ndim == 0 else out


def skellam_logpmf(x: Any, variance: float) -> npt.NDArray[np.float64] | np.float64:
    """log P(k) of Sk(v) at integer-valued ``x`` (vectorised), finite even where the pmf underflows.

    ``log(ive(|k|, v))`` where that is a normal double and v < 1e4; elsewhere (far tail, P < 2.2e-308, or
    v ≥ 1e4) the uniform asymptotic (Debye) expansion of I_ν(v), ν = |k|, with terms u₀…u₄ (DLMF 10.41.3,
    10.41.10), written in a cancellation-free form. Its truncation error on the log is about 8e-4·ν⁻⁵ at
    worst (when v ≪ ν; much smaller when v ≳ ν), i.e. below 1e-12 for ν ≥ 50 or v ≥ 1e4 (measured against
    mpmath). The tail branch meets ν < 50 only for variances below ~3e-5; there the error grows to ~2e-5
    at ν = 2 (v = 1e-200), where the asymptotic series is short of accuracy.
    """
    variance = check_variance(variance)
    k = np.abs(check_integer_points("x", x))
    if variance >= _DEBYE_MIN_VARIANCE:
        out = _log_ive_debye(k, variance)
        return out[()] if out.ndim == 0 else out
    from scipy import special  # lazy: not needed to sample, only for the pmf

    with np.errstate(divide="ignore"):
        out = np.log(np.atleast_1d(special.ive(k, variance))).reshape(k.shape)
    tail = ~(out > math.log(np.finfo(np.float64).tiny))
    if np.any(tail):
        out[tail] = _log_ive_debye(k[tail], variance)
    result: npt.NDArray[np.float64] | np.float64 = out[()] if out.ndim == 0 else out
    return result


# From this variance on, the Debye expansion is more accurate than scipy.special.ive (AMOS zbesi), which
# drifts to ~1e-11 relative error by v = 1e8 and returns NaN beyond ~2e9 (both measured against mpmath).
_DEBYE_MIN_VARIANCE = 1e4


def _log_ive_debye(nu: np.ndarray, v: float) -> npt.NDArray[np.float64]:
    """log(e^{−v} I_ν(v)) by the Debye expansion (DLMF 10.41.3, 10.41.10) up to u₄, for ν ≥ 0, v > 0.

    With r = √(ν² + v²) and p = ν/r: νη − v = ν²/(r + v) − ν·asinh(ν/v) (no cancellation), and
    u_k(p)/ν^k = poly_k(p²)/r^k, so ν = 0 is covered (it reduces to Hankel's expansion, DLMF 10.40.1).
    """
    nu = np.asarray(nu, dtype=np.float64)
    r = np.hypot(nu, v)
    p2 = (nu / r) ** 2
    t1 = (3.0 - 5.0 * p2) / (24.0 * r)
    t2 = (81.0 - 462.0 * p2 + 385.0 * p2 * p2) / (1152.0 * r * r)
    t3 = (30375.0 - 369603.0 * p2 + 765765.0 * p2 * p2 - 425425.0 * p2**3) / (414720.0 * r**3)
    t4 = (4465125.0 - 94121676.0 * p2 + 349922430.0 * p2**2 - 446185740.0 * p2**3 + 185910725.0 * p2**4) / (
        39813120.0 * r**4
    )
    expo = nu * nu / (r + v) - nu * np.arcsinh(nu / v)
    result: npt.NDArray[np.float64] = expo - 0.5 * np.log(2.0 * math.pi * r) + np.log1p(t1 + t2 + t3 + t4)
    return result
