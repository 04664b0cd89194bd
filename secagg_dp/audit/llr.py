"""Exact log likelihood ratios of a canary coordinate under integer noise (the strongest test's statistic).

The observer sees y = s + Z on the integer lattice, with s = +mu (D) or -mu (D') the canary's shift and Z the
noise sum left in its view. By the Neyman-Pearson lemma the test {log LR(y) > tau} with the exact
LR(y) = P[Z = y - mu] / P[Z = y + mu] is the most powerful at its level; any statistic gives a VALID lower
bound (Jagielski, Ullman & Oprea 2020), the exact one the highest.

* Skellam noise of total variance v (a sum of independent symmetric Skellams is symmetric Skellam with the
  summed variance, Skellam 1946): Z ~ Sk(v/2, v/2), pmf from :data:`scipy.stats.skellam`.
* A sum of k discrete Gaussians N_Z(0, sigma^2) (Canonne, Kamath & Steinke 2020): the exact k-fold
  convolution of the pmf truncated at |z| <= ceil(sigma sqrt(2 ln 2 * 80)) + 1 per share (each share's
  truncated mass below 2^-79, so the sum's below k 2^-79; :func:`ddg_sum_log_pmf` returns it), cached per
  (sigma, k).
* The analyst, who does not know whether the canary took part: the mixture w P[Z = y -+ mu] + (1 - w) P[Z = y]
  (:func:`mixture_llr`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

from secagg_dp.errors import ParameterError

__all__ = ["skellam_log_pmf", "ddg_sum_log_pmf", "exact_llr", "mixture_llr", "DDG_TAIL_BITS", "MAX_SUPPORT"]

DDG_TAIL_BITS = 80  #: each discrete Gaussian share is truncated where its tail mass is below 2^-DDG_TAIL_BITS
MAX_SUPPORT = 1 << 22  # beyond this many points the convolution is not attempted (use the Gaussian fallback)


def _check_pos(name: str, value: float) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ParameterError(f"Argument {name!r} must be a finite number > 0, not {value!r}.")
    return v


def skellam_log_pmf(z: npt.ArrayLike, variance: float) -> npt.NDArray[np.float64]:
    """log P[Z = z] for Z ~ Sk(v/2, v/2), the symmetric Skellam law of variance v (vectorised): e^-v I_|z|(v),
    I the modified Bessel function (Skellam 1946), via the exponentially scaled scipy.special.ive."""
    from scipy.special import ive
    from scipy.stats import skellam

    v = _check_pos("variance", variance)
    zz = np.abs(np.asarray(z, dtype=np.float64))
    with np.errstate(divide="ignore", under="ignore"):
        out: npt.NDArray[np.float64] = np.log(ive(zz, v))  # P[Z = z] = e^-v I_|z|(v) (Skellam 1946)
    bad = ~np.isfinite(out)
    if np.any(bad):  # far tails where the scaled Bessel function underflows: scipy's log pmf
        out[bad] = skellam.logpmf(zz[bad], v / 2.0, v / 2.0)
    return out


@functools.lru_cache(maxsize=32)
def _ddg_sum_table(sigma: float, k: int) -> tuple[npt.NDArray[np.float64], int, float]:
    """(log pmf on [-R, R], R, truncated mass bound) of the sum of k discrete Gaussians N_Z(0, sigma^2)."""
    r = math.ceil(sigma * math.sqrt(2.0 * math.log(2.0) * DDG_TAIL_BITS)) + 1
    if (2 * r + 1) * k > MAX_SUPPORT:
        raise ParameterError(
            f"Arguments 'sigma' = {sigma} and 'k' = {k}: the exact convolution needs {(2 * r + 1) * k} support "
            f"points (> {MAX_SUPPORT}); use the Gaussian approximation."
        )
    x = np.arange(-r, r + 1, dtype=np.float64)
    one = np.exp(-(x**2) / (2.0 * sigma**2))
    one /= one.sum()  # N_Z(0, sigma^2) on [-r, r]; the mass outside is < 2^-79 (ddg_sum_log_pmf)
    from scipy.signal import fftconvolve

    acc = one
    for _ in range(k - 1):
        acc = np.clip(fftconvolve(acc, one), 0.0, None)
    acc /= acc.sum()
    with np.errstate(divide="ignore"):
        logp = np.log(acc)
    return logp, k * r, float(k) * 2.0 ** (1 - DDG_TAIL_BITS)


def ddg_sum_log_pmf(z: npt.ArrayLike, sigma: float, k: int) -> tuple[npt.NDArray[np.float64], float]:
    """(log P[Z = z], truncated mass bound) for Z the sum of ``k`` independent N_Z(0, sigma^2) shares,
    by exact convolution of the pmfs truncated at radius r = ceil(sigma sqrt(160 ln 2)) + 1 each. Tail mass per
    share: sum_{|x| > r} e^{-x^2/(2 sigma^2)} <= 2 int_r^inf e^{-x^2/(2 sigma^2)} dx <= sigma sqrt(2 pi) 2^-80,
    over a normaliser >= max(1, sigma sqrt(2 pi) (1 - 2 e^{-2 pi^2 sigma^2})) (Poisson summation; Canonne,
    Kamath & Steinke 2020, Sec. 2), so below 2^-79; the sum's below k 2^-79 (union bound), which is returned.
    Points outside the truncated support get -inf (their true mass is below that bound)."""
    s = _check_pos("sigma", sigma)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ParameterError(f"Argument 'k' must be an integer >= 1, not {k!r}.")
    logp, r, tail = _ddg_sum_table(s, k)
    zz = np.asarray(z, dtype=np.int64)
    idx = zz + r
    inside = (idx >= 0) & (idx < len(logp))
    out = np.full(zz.shape, -np.inf)
    out[inside] = logp[idx[inside]]
    return out, tail


def exact_llr(log_pmf_minus: npt.ArrayLike, log_pmf_plus: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """log LR = log P[Z = y - mu] - log P[Z = y + mu] from the two log pmfs (inf - inf -> 0: both impossible)."""
    a, b = np.asarray(log_pmf_minus, dtype=np.float64), np.asarray(log_pmf_plus, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isneginf(a) & np.isneginf(b), 0.0, a - b)
    return np.asarray(out, dtype=np.float64)


def mixture_llr(
    log_pmf_minus: npt.ArrayLike, log_pmf_plus: npt.ArrayLike, log_pmf_zero: npt.ArrayLike, weight: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """log [(w P[Z = y - mu] + (1 - w) P[Z = y]) / (w P[Z = y + mu] + (1 - w) P[Z = y])]: the analyst's exact LR
    when the canary is in the sum with probability w (0 where w = 0)."""
    w = np.asarray(weight, dtype=np.float64)
    if np.any((w < 0) | (w > 1)):
        raise ParameterError("Argument 'weight' must lie in [0, 1].")
    with np.errstate(divide="ignore"):
        lw, l1w = np.log(w), np.log1p(-w)
    a = np.logaddexp(lw + np.asarray(log_pmf_minus), l1w + np.asarray(log_pmf_zero))
    b = np.logaddexp(lw + np.asarray(log_pmf_plus), l1w + np.asarray(log_pmf_zero))
    return exact_llr(np.where(w > 0, a, -np.inf), np.where(w > 0, b, -np.inf))
