"""Unbiased and conditional randomized rounding to the integer grid, and the norm bounds it implies.

Source: Kairouz, Liu & Steinke 2021, "The distributed discrete Gaussian mechanism for federated learning
with secure aggregation" (ICML 2021; arXiv:2102.06387 v4), Sec. 4.1, Theorem 1 / Eq. (2) and
Proposition 22 (conditional randomized rounding). Referred to below as [KLS21].
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_real
from secagg_dp.errors import ParameterError, RoundingError
from secagg_dp.rng import resolve_rng

__all__ = [
    "shrink_to_norm",
    "rounded_l2_bound",
    "rounded_l1_bound",
    "stochastic_round",
    "conditional_round",
]

_EPS = 2.0**-53  # unit roundoff of float64


def rounded_l2_bound(norm_bound: float, dim: int, beta: float) -> float:
    """Δ₂: the L2 norm bound of a vector of norm ≤ ``norm_bound`` after (conditional) randomized rounding.

    [KLS21] Theorem 1 / Eq. (2), Proposition 22, with d the (padded) dimension:

        Δ₂ = min{ C + √d,  sqrt( C² + d/4 + sqrt(2 ln(1/β)) · (C + √d/2) ) }

    The first term is deterministic (every coordinate moves by less than 1); the second holds with
    probability ≥ 1 − β for unconditional rounding, so rounding redrawn until ‖x̃‖₂ ≤ Δ₂ stops after
    ≤ 1/(1 − β) draws in expectation. β = 0 means unconditional rounding: Δ₂ = C + √d.
    """
    c = check_real("norm_bound", norm_bound, lo=0.0)
    d = check_int("dim", dim, lo=1)
    beta = check_real("beta", beta, lo=0.0, hi=1.0, hi_open=True)
    bound1 = c + math.sqrt(d)
    if beta == 0.0:
        return bound1
    t = d / 4.0 + math.sqrt(2.0 * math.log(1.0 / beta)) * (c + math.sqrt(d) / 2.0)
    # sqrt(C² + t) evaluated as C + t/(C + sqrt(C² + t)): no cancellation when C² ≫ t.
    bound2 = c + t / (c + math.sqrt(c * c + t))
    return min(bound1, bound2)


def rounded_l1_bound(l2_bound: float, dim: int) -> float:
    """Δ₁ = Δ₂ · min(√d, Δ₂) for an integer vector with ‖x̃‖₂ ≤ Δ₂.

    ‖v‖₁ ≤ √d ‖v‖₂ (Cauchy–Schwarz), and for integer v, |v_i| ≤ v_i² so ‖v‖₁ ≤ ‖v‖₂². Used for the
    L1 sensitivity in [KLS21] Proposition 14 / Eq. (17).
    """
    l2 = check_real("l2_bound", l2_bound, lo=0.0)
    d = check_int("dim", dim, lo=1)
    return l2 * min(math.sqrt(d), l2)


def shrink_to_norm(y: np.ndarray, norm_bound: float) -> np.ndarray:
    """Rows of ``y`` scaled so their exact L2 norm is ≤ ``norm_bound`` despite float64 error.

    Clipping, rotating and scaling in float64 can leave ‖y‖₂ a few ulps above C = c·s; the bound of
    [KLS21] Prop. 22 needs ‖y‖₂ ≤ C exactly. Rows whose float norm exceeds C·(1 − γ), γ = 4(d + 2)·2^-53
    (a safe bound on the relative error of a d-term float norm), are scaled to C·(1 − γ). Departure from
    the paper's exact-arithmetic model: a relative shrink ≤ γ (≈ 5e-10 at d = 2^20), far below rounding error.
    """
    y = np.asarray(y, dtype=np.float64)
    gamma = 4.0 * (y.shape[-1] + 2) * _EPS
    target = norm_bound * (1.0 - gamma)
    norms = np.linalg.norm(y, axis=-1, keepdims=True)
    factor = np.where(norms > target, target / np.where(norms > 0, norms, 1.0), 1.0)
    return y * factor


_VECDOT = getattr(np, "vecdot", None)


def _row_sq_norms(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Σ_j a_ij² per row of a 2-D float64 array: ``numpy.vecdot`` (numpy >= 2; one call, half the time of
    ``einsum`` here), else ``einsum``. The summation order is each function's own; the γ_d bands of the
    callers hold for any order (Higham 2002, §3.1)."""
    out: npt.NDArray[np.float64] = _VECDOT(a, a) if _VECDOT is not None else np.einsum("ij,ij->i", a, a)
    return out


def _shrink_rows_inplace(y: npt.NDArray[np.float64], norm_bound: float) -> None:
    """:func:`shrink_to_norm` in place on a 2-D float64 array (the same γ, target and guarantee).

    The row norms come from one inner-product pass (:func:`_row_sq_norms`); Higham's bound γ_d on a d-term
    float inner product holds for any order of summation, so the γ band of :func:`shrink_to_norm` covers it.
    Only rows above the target are rescaled (none when the caller already shrank by more than γ, as the codec
    does).
    """
    gamma = 4.0 * (y.shape[-1] + 2) * _EPS
    target = norm_bound * (1.0 - gamma)
    sq = _row_sq_norms(y)
    if not sq.size or math.sqrt(float(np.maximum.reduce(sq))) <= target:  # the usual case: one reduction
        return
    norms = np.sqrt(sq)
    over = np.flatnonzero(norms > target)
    y[over] *= (target / norms[over])[:, None]


def stochastic_round(y: npt.ArrayLike, *, rng: np.random.Generator | None = None) -> npt.NDArray[np.int64]:
    """Unbiased randomized rounding: ⌊y⌋ + Bernoulli(y − ⌊y⌋), coordinatewise, returned as int64.

    E[x̃] = y up to the 2^-53 granularity of ``rng.random`` ([KLS21] Sec. 4.1). The fractional part
    y − ⌊y⌋ is computed exactly in float64. Caller guarantees |y| < 2^62 (checked here).
    """
    rng = resolve_rng(rng)
    y = np.asarray(y, dtype=np.float64)
    if y.size and not np.all(np.abs(y) < 2.0**62):
        raise ParameterError("Argument 'y' must be finite with |y| < 2^62 to be rounded to int64.")
    floor = np.floor(y)
    frac = y - floor
    up = rng.random(y.shape) < frac
    out: npt.NDArray[np.int64] = floor.astype(np.int64)
    out += up
    return out


def _within(rows: npt.NDArray[np.int64] | npt.NDArray[np.float64], bound: float) -> npt.NDArray[np.bool_]:
    """Exact test ‖row‖₂ ≤ bound for integer-valued rows (2-D, int64 or float64): float path, exact fallback.

    The float64 inner product of a row with itself has relative error ≤ γ_d ≈ d·2^-53 (Higham, Accuracy
    and Stability of Numerical Algorithms, 2nd ed. 2002, §3.1); we use a 4(d + 2)·2^-53 band, and rows
    whose float result falls inside it are decided with Python integers against the exact square of the
    float ``bound``. Float64 rows must hold integers exactly (as :func:`_round_rows` makes them).
    """
    ok = np.ones(rows.shape[0], dtype=np.bool_)
    ok[_rejected(rows, bound)] = False
    return ok


def _rejected(rows: npt.NDArray[np.int64] | npt.NDArray[np.float64], bound: float) -> npt.NDArray[np.intp]:
    """Indices of the rows with ‖row‖₂ > bound (increasing): the complement of :func:`_within`, same test."""
    d = rows.shape[-1]
    f = np.asarray(rows, dtype=np.float64)
    sq = _row_sq_norms(f)
    b2 = bound * bound
    band = 4.0 * (d + 2) * _EPS
    over = np.flatnonzero(sq > b2 * (1.0 - band))
    if not over.size:
        return over
    undecided = sq[over] <= b2 * (1.0 + band)
    if undecided.any():
        exact_b2 = Fraction(bound) ** 2
        keep_over = np.ones(over.size, dtype=np.bool_)
        for k in np.flatnonzero(undecided):
            keep_over[k] = sum(int(v) * int(v) for v in rows[over[k]].tolist()) > exact_b2
        over = over[keep_over]
    return over


def _round_rows(y: npt.NDArray[np.float64], rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """⌊y⌋ + Bernoulli(y − ⌊y⌋) per coordinate, as integer-valued float64 (the draws of :func:`stochastic_round`).

    Consumes ``rng.random(y.shape)`` exactly as :func:`stochastic_round` does and gives the same integers
    without the int64 conversion: below 2^53 in magnitude ⌊y⌋ + 1 is exact in float64, and from 2^53 on every
    float64 is an integer, so y − ⌊y⌋ = 0 and nothing is added.
    """
    out = np.floor(y)
    frac = np.subtract(y, out)
    up = rng.random(y.shape)
    out += up < frac
    return out


def conditional_round(
    y: np.ndarray,
    bound: float,
    *,
    rng: np.random.Generator | None = None,
    max_attempts: int = 1000,
) -> np.ndarray:
    """Conditional randomized rounding ([KLS21] Proposition 22): redraw each row until ‖x̃‖₂ ≤ ``bound``.

    ``y`` is 1-D (one vector) or 2-D (one vector per row; rows are redrawn independently, so a batch of
    clients costs one vectorised draw plus redraws of the few rejected rows). Raises
    :class:`RoundingError` if some row is still above the bound after ``max_attempts`` draws.

    Departure from plain stochastic rounding, as in [KLS21]: conditioning makes x̃ slightly biased; use
    β = 0 (bound = C + √d, never rejects) where exact unbiasedness matters more than Δ₂.
    """
    rng = resolve_rng(rng)
    bound = check_real("bound", bound, lo=0.0)
    max_attempts = check_int("max_attempts", max_attempts, lo=1)
    y = np.asarray(y, dtype=np.float64)
    if y.ndim not in (1, 2):
        raise ParameterError(f"Argument 'y' must be 1-D or 2-D, not shape {y.shape}.")
    if y.size and not (float(y.max()) < 2.0**62 and float(y.min()) > -(2.0**62)):
        raise ParameterError("Argument 'y' must be finite with |y| < 2^62 to be rounded to int64.")
    y2 = y.reshape(1, -1) if y.ndim == 1 else y
    return _conditional_round_rows(y2, bound, rng, max_attempts).astype(np.int64).reshape(y.shape)


def _conditional_round_rows(
    y2: npt.NDArray[np.float64], bound: float, rng: np.random.Generator, max_attempts: int
) -> npt.NDArray[np.float64]:
    """:func:`conditional_round` of the rows of a checked 2-D array (|y| < 2^62), as integer-valued float64."""
    r = _round_rows(y2, rng)  # first draw of every row, in place of the output
    pending = _rejected(r, bound)
    for _ in range(max_attempts - 1):
        if pending.size == 0:
            break
        again = _round_rows(y2[pending], rng)
        good = _within(again, bound)
        r[pending[good]] = again[good]
        pending = pending[~good]
    if pending.size:
        raise RoundingError(
            f"Conditional randomized rounding did not reach ‖x̃‖₂ ≤ {bound:.6g} for {pending.size} vector(s) "
            f"within max_attempts={max_attempts} draws. To fix, check that the input norm is at most the "
            "clip (the bound assumes it), raise 'max_attempts', or use a smaller 'beta' (β = 0 never rejects)."
        )
    return r
