"""Argument checks shared by the noise samplers and pmfs (private)."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from secagg_dp._validate import check_int, check_real
from secagg_dp.errors import ParameterError

__all__ = ["SIGMA_MAX", "VARIANCE_MAX", "check_sigma", "check_variance", "check_size", "check_integer_points"]

#: Largest standard deviation accepted by the discrete Gaussian samplers and pmf.
SIGMA_MAX = 1e6
#: Largest Skellam variance accepted (the same scale: SIGMA_MAX ** 2).
VARIANCE_MAX = 1e12


def check_sigma(value: Any) -> float:
    """Return ``sigma`` as a float in (0, SIGMA_MAX]."""
    return check_real("sigma", value, lo=0.0, hi=SIGMA_MAX, lo_open=True)


def check_variance(value: Any) -> float:
    """Return ``variance`` as a float in (0, VARIANCE_MAX]."""
    return check_real("variance", value, lo=0.0, hi=VARIANCE_MAX, lo_open=True)


def check_size(value: Any) -> tuple[int, ...]:
    """Return ``size`` (a non-negative int or a tuple/list of them) as a shape tuple."""
    if isinstance(value, (tuple, list)):
        return tuple(check_int(f"size[{i}]", v, lo=0) for i, v in enumerate(value))
    return (check_int("size", value, lo=0),)


def check_integer_points(name: str, x: Any) -> np.ndarray:
    """Return ``x`` as a float64 array after checking every entry is a finite integer value.

    float64 is used for the arithmetic of the pmfs only (x**2 of an int64 would overflow); a point whose
    magnitude exceeds 2**53 has probability far below the smallest double anyway.
    """
    if isinstance(x, numbers.Number) and not isinstance(x, numbers.Real):
        raise ParameterError(f"Argument '{name}' must be integer-valued, not {x!r}.")
    arr = np.asarray(x)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        raise ParameterError(f"Argument '{name}' must be an integer array, not dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr)):
        raise ParameterError(f"Argument '{name}' must contain only finite integer values.")
    return arr
