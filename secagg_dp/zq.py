"""Arithmetic in Z_q for q = 2^b, 1 <= b <= 62, on uint64 arrays.

uint64 addition and subtraction wrap modulo 2^64; since q divides 2^64, reducing the wrapped result
with the mask q - 1 gives the exact residue modulo q. No value ever passes through float64, so sums are
bit-exact for every b up to 62 (and any number of terms).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int
from secagg_dp.errors import ParameterError

__all__ = [
    "MAX_BITS",
    "check_bits",
    "modulus",
    "check_residues",
    "add_mod",
    "sub_mod",
    "neg_mod",
    "sum_mod",
    "wrap_int64",
    "centered",
]

MAX_BITS = 62


def check_bits(bits: object, name: str = "bits") -> int:
    """Validate a bit width b in [1, 62]."""
    return check_int(name, bits, lo=1, hi=MAX_BITS)


def modulus(bits: int) -> int:
    """q = 2^bits as a Python int."""
    return 1 << check_bits(bits)


def _mask(bits: int) -> np.uint64:
    return np.uint64((1 << bits) - 1)


def check_residues(name: str, a: object, bits: int) -> npt.NDArray[np.uint64]:
    """Return ``a`` as a uint64 array after checking every entry lies in [0, 2^bits).

    Signed or float arrays are refused (a float64 cannot carry 62 exact bits), as are values >= q:
    reduced and unreduced values are never mixed silently.
    """
    arr = np.asarray(a)
    if arr.dtype.kind not in "ui":
        raise ParameterError(
            f"Argument '{name}' must be an integer array of residues mod 2^{bits}, not dtype {arr.dtype}."
        )
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise ParameterError(f"Argument '{name}' must hold residues in [0, 2^{bits}), found a negative value.")
    arr = arr.astype(np.uint64, copy=False)
    if arr.size and int(arr.max()) >> bits:
        raise ParameterError(f"Argument '{name}' must hold residues in [0, 2^{bits}), found {int(arr.max())}.")
    return arr


def add_mod(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64], bits: int) -> npt.NDArray[np.uint64]:
    """(a + b) mod 2^bits for uint64 residues."""
    return (a + b) & _mask(bits)


def sub_mod(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64], bits: int) -> npt.NDArray[np.uint64]:
    """(a - b) mod 2^bits for uint64 residues."""
    return (a - b) & _mask(bits)


def neg_mod(a: npt.NDArray[np.uint64], bits: int) -> npt.NDArray[np.uint64]:
    """(-a) mod 2^bits for uint64 residues."""
    return (np.uint64(0) - a) & _mask(bits)


def sum_mod(arrays: Iterable[npt.NDArray[np.uint64]] | npt.NDArray[np.uint64], bits: int) -> npt.NDArray[np.uint64]:
    """Exact sum mod 2^bits of uint64 residue vectors (a 2-D array sums over axis 0)."""
    if isinstance(arrays, np.ndarray):
        if arrays.dtype != np.uint64:
            raise ParameterError(f"Argument 'arrays' must have dtype uint64, not {arrays.dtype}.")
        column_sums: npt.NDArray[np.uint64] = arrays.sum(axis=0, dtype=np.uint64)  # numpy types .sum(dtype=) as Any
        return np.bitwise_and(column_sums, _mask(bits))
    total: npt.NDArray[np.uint64] | None = None
    for a in arrays:
        total = a.astype(np.uint64, copy=True) if total is None else total + a  # wraps mod 2^64
    if total is None:
        raise ParameterError("Argument 'arrays' must contain at least one vector.")
    return total & _mask(bits)


def wrap_int64(x: npt.NDArray[np.int64], bits: int) -> npt.NDArray[np.uint64]:
    """Map signed integers (int64) to their residues mod 2^bits as uint64 (two's complement, exact)."""
    x = np.asarray(x)
    if x.dtype != np.int64:
        raise ParameterError(f"Argument 'x' must have dtype int64, not {x.dtype}.")
    return x.view(np.uint64) & _mask(bits)


def centered(a: np.ndarray, bits: int) -> np.ndarray:
    """Centred representatives in [-q/2, q/2) of uint64 residues, as int64 (exact for bits <= 62)."""
    a = np.asarray(a, dtype=np.uint64) & _mask(bits)
    half = np.uint64(1 << (bits - 1))
    signed = a.astype(np.int64)
    return np.where(a >= half, signed - np.int64(1 << bits), signed)
