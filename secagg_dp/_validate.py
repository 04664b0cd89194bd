"""Argument validation shared by the whole package.

Each helper returns the validated (and normalised) value or raises :class:`ParameterError` /
``TypeError`` with a message naming the argument, the expectation and the value received. The scalar checks
take ``what`` (the noun before the name, ``"Argument"``) and ``error`` (the exception class) so that other
layers, such as the simulator's config (``"Config key"``, ``ConfigError``), reuse them instead of copies.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from secagg_dp.errors import ParameterError

__all__ = [
    "check_int",
    "check_real",
    "check_probability",
    "check_finite_array",
    "all_finite",
    "range_text",
]


def _fmt(value: Any) -> str:
    return repr(value) if not isinstance(value, float) else f"{value!r}"


def check_int(
    name: str,
    value: Any,
    *,
    lo: int | None = None,
    hi: int | None = None,
    strict: bool = False,
    what: str = "Argument",
    error: type[ParameterError] = ParameterError,
) -> int:
    """Return ``value`` as ``int`` if it is an integer (bools refused) in ``[lo, hi]``.

    ``strict=True`` also refuses an integral float (``7.0``): a count or a threshold is an integer type."""
    if type(value) is int and (lo is None or value >= lo) and (hi is None or value <= hi):
        return value  # fast path (exact int, so not a bool): the abstract-class check below is slow in hot loops
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer() and not strict:
            value = int(value)
        else:
            raise error(f"{what} '{name}' must be an integer{range_text(lo, hi)}, not {_fmt(value)}.")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise error(f"{what} '{name}' must be an integer{range_text(lo, hi)}, not {value}.")
    return int(value)


def check_real(
    name: str,
    value: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    what: str = "Argument",
    error: type[ParameterError] = ParameterError,
) -> float:
    """Return ``value`` as a finite ``float`` in the given (open or closed) interval."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(f"{what} '{name}' must be a real number, not {_fmt(value)}.")
    v = float(value)
    if not math.isfinite(v):
        raise error(f"{what} '{name}' must be finite, not {v}.")
    bad = (lo is not None and (v < lo or (lo_open and v == lo))) or (
        hi is not None and (v > hi or (hi_open and v == hi))
    )
    if bad:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        lo_s = "-inf" if lo is None else f"{lo:g}"
        hi_s = "inf" if hi is None else f"{hi:g}"
        raise error(f"{what} '{name}' must lie in {left}{lo_s}, {hi_s}{right}, not {v!r}.")
    return v


def check_probability(name: str, value: Any, *, allow_zero: bool = True, allow_one: bool = True) -> float:
    """Return ``value`` as a float probability in [0, 1] (ends optionally excluded)."""
    return check_real(name, value, lo=0.0, hi=1.0, lo_open=not allow_zero, hi_open=not allow_one)


def check_finite_array(
    name: str, x: Any, *, ndim: int | None = None, length: int | None = None, finite: bool = True
) -> np.ndarray:
    """Return ``x`` as a float64 array after checking it is real, finite and of the expected shape.

    ``finite`` False: no finiteness check here (for callers that check it as part of a pass they make anyway,
    with the same message)."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise ParameterError(f"Argument '{name}' must be a real numeric array, not dtype {arr.dtype}.")
    arr = arr.astype(np.float64, copy=False)
    if ndim is not None and arr.ndim != ndim:
        raise ParameterError(f"Argument '{name}' must have {ndim} dimension(s), not shape {arr.shape}.")
    if length is not None and arr.shape[-1] != length:
        raise ParameterError(f"Argument '{name}' must have length {length}, not {arr.shape[-1]}.")
    if finite and not all_finite(arr):
        raise ParameterError(f"Argument '{name}' contains NaN or infinite values.")
    return arr


def all_finite(arr: np.ndarray) -> bool:
    """Whether every entry of the float array ``arr`` is finite, in one reduction where possible.

    A NaN or an infinity makes the float sum NaN or infinite, so a finite sum proves every entry finite (one
    read of the array instead of a mask and its reduction); a non-finite sum (which finite entries can also
    give, by overflow) is decided entry by entry.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(arr)):
            return True
    return bool(np.isfinite(arr).all())


def range_text(lo: int | None, hi: int | None) -> str:
    """' >= lo', ' <= hi', ' in [lo, hi]' or '' : the integer range of a message."""
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f" >= {lo}"
    if lo is None:
        return f" <= {hi}"
    return f" in [{lo}, {hi}]"
