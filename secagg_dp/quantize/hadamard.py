"""Randomized Walsh–Hadamard rotation: R = H·D on R^d, d a power of two.

H is the Sylvester–Hadamard matrix normalised by 1/sqrt(d) (so H = H^T = H^{-1}) and D = diag(ε) with
Rademacher signs ε drawn from the public per-round ``rotation_seed``. R is orthogonal, R^{-1} = D·H.
Kairouz, Liu & Steinke 2021 ("The distributed discrete Gaussian mechanism", arXiv:2102.06387), Sec. 4.2:
the rotation "flattens" a vector so that every coordinate of R·w is sub-Gaussian with variance proxy
‖w‖²/d (their Lemma 29 with flatness ρ = 1; Hoeffding's inequality on the Rademacher sum).

The fast transform uses log2(d) reshape-based butterfly stages, O(d log d), vectorised over any leading
(batch) axes, with two ping-pong buffers and no per-stage allocation.
"""

from __future__ import annotations

import math

import numpy as np

from secagg_dp._validate import check_int
from secagg_dp.errors import ParameterError

__all__ = ["next_pow2", "fwht", "rademacher_signs", "rotate", "unrotate"]

#: Largest padded dimension accepted (2^30 float64 coordinates = 8 GiB per vector).
MAX_PADDED_DIM = 1 << 30


def next_pow2(dim: int) -> int:
    """Smallest power of two >= ``dim`` (dim >= 1)."""
    dim = check_int("dim", dim, lo=1, hi=MAX_PADDED_DIM)
    return 1 << (dim - 1).bit_length()


def _check_pow2_last_axis(x: np.ndarray) -> int:
    if x.ndim == 0:
        raise ParameterError("Argument 'x' must have at least one dimension, not a scalar.")
    d: int = x.shape[-1]
    if d < 1 or d & (d - 1):
        raise ParameterError(f"Argument 'x' must have a power-of-two last axis, not length {d}.")
    return d


def fwht(x: np.ndarray) -> np.ndarray:
    """Orthonormal fast Walsh–Hadamard transform along the last axis: returns H·x, H = H_d / sqrt(d).

    H_d is the Sylvester (natural-order) Hadamard matrix, H_{2m} = [[H_m, H_m], [H_m, -H_m]], the order
    of ``scipy.linalg.hadamard``. Stage h (h = 1, 2, …, d/2) maps each pair (u, v) at distance h inside
    blocks of 2h to (u + v, u − v). Returns a new float64 array; ``x`` is not modified.
    """
    arr = np.asarray(x, dtype=np.float64)
    d = _check_pow2_last_axis(arr)
    shape = arr.shape
    m = arr.size // d if d else 0
    a = np.array(arr, dtype=np.float64, copy=True).reshape(m, d)
    if d == 1:
        return a.reshape(shape)
    b = np.empty_like(a)
    h = 1
    while h < d:
        src = a.reshape(m, d // (2 * h), 2, h)
        dst = b.reshape(m, d // (2 * h), 2, h)
        np.add(src[:, :, 0, :], src[:, :, 1, :], out=dst[:, :, 0, :])
        np.subtract(src[:, :, 0, :], src[:, :, 1, :], out=dst[:, :, 1, :])
        a, b = b, a
        h *= 2
    a *= 1.0 / math.sqrt(d)
    return a.reshape(shape)


def rademacher_signs(rotation_seed: int, d: int) -> np.ndarray:
    """The public sign vector ε ∈ {−1, +1}^d of the rotation, as float64.

    Derivation (a fixed specification so every party computes the same ε):
    ``b = numpy.random.Generator(PCG64(rotation_seed)).integers(0, 2, size=d, dtype=uint8)`` and
    ε = 1 − 2b. The seed is public; this stream needs no secrecy, only agreement.
    """
    seed = check_int("rotation_seed", rotation_seed, lo=0)
    d = check_int("d", d, lo=1, hi=MAX_PADDED_DIM)
    bits = np.random.Generator(np.random.PCG64(seed)).integers(0, 2, size=d, dtype=np.uint8)
    return 1.0 - 2.0 * bits.astype(np.float64)


def rotate(x: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """R·x = H·(ε ⊙ x) along the last axis (x already padded to len(signs))."""
    return fwht(np.asarray(x, dtype=np.float64) * signs)


def unrotate(y: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """R^{-1}·y = ε ⊙ (H·y) along the last axis (H is symmetric and orthogonal, ε² = 1)."""
    out = fwht(y)
    out *= signs
    return out
