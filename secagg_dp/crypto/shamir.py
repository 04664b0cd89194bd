"""t-out-of-n Shamir secret sharing of byte strings over GF(p), p = 65537 = 2^16 + 1.

Encoding: a secret of 2m bytes is read as m big-endian 16-bit pieces, each an element of GF(65537)
(pieces are < 2^16 < p, so the encoding is injective). Every piece gets its own random polynomial of
degree t - 1 whose coefficients are drawn by rejection sampling from a cryptographic source (``os.urandom``
by default). Holder i receives the evaluations at its point x_i in [1, p - 1] (0 is refused: it is the
secret). Sharing is one Vandermonde product V (n x t) @ C (t x m); reconstruction is one Lagrange
combination of **exactly t** shares with coefficients cached per point set. Fewer than t shares raise
:class:`ProtocolError` (Shamir 1979; information-theoretic hiding for any prime > n).

Arithmetic: GF(65537)* is cyclic of order 2^16 with generator 3, so powers and products of nonzero
elements are table look-ups on discrete logarithms (:func:`field` builds the two 2^16-entry tables once),
and the sums of products in V @ C and in the Lagrange combination are exact in float64 (each product is
below 2^32, a sum of t of them below 2^53 for any t <= p - 1) before one reduction mod p. Why p = 65537
and not a 31-bit prime: the tables only exist for a small field; the cost is at most p - 1 = 65536 share
holders per round.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int
from secagg_dp.crypto.randomness import RandomSource, resolve_source, uniform_below
from secagg_dp.errors import ParameterError, ProtocolError

__all__ = [
    "PRIME",
    "MAX_HOLDERS",
    "PIECES_PER_32_BYTES",
    "field",
    "encode",
    "decode",
    "share",
    "reconstruct",
    "lagrange_at_zero",
]

PRIME = 65537
MAX_HOLDERS = PRIME - 1
PIECES_PER_32_BYTES = 16


_ORDER = PRIME - 1  # order of the multiplicative group
_GENERATOR = 3  # a primitive root mod every Fermat prime above 3


@lru_cache(maxsize=1)
def field() -> tuple[np.ndarray, np.ndarray]:
    """The tables (exp, log) of GF(65537)*: exp[i] = 3^i mod p for i in [0, 2^16), log[exp[i]] = i
    (log[0] unused). Built once per process in a few milliseconds; read-only."""
    exp = np.empty(_ORDER, dtype=np.int64)
    x = 1
    for i in range(_ORDER):
        exp[i] = x
        x = x * _GENERATOR % PRIME
    if x != 1 or np.unique(exp).size != _ORDER:  # 3 generates the whole group
        raise AssertionError("3 is not a primitive root mod 65537")
    log = np.zeros(PRIME, dtype=np.int64)
    log[exp] = np.arange(_ORDER)
    exp.flags.writeable = False
    log.flags.writeable = False
    return exp, log


def _matmul_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a @ b) mod p for entries in [0, p): exact in float64 (see the module docstring)."""
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64) % PRIME


def encode(secrets: Sequence[bytes]) -> np.ndarray:
    """Concatenate byte strings of even length into big-endian 16-bit pieces (int64 array)."""
    blob = b"".join(bytes(s) for s in secrets)
    if len(blob) % 2:
        raise ParameterError("Secrets must have an even total length in bytes.")
    return np.frombuffer(blob, dtype=">u2").astype(np.int64)


def decode(pieces: np.ndarray) -> bytes:
    """Inverse of :func:`encode`; a piece >= 2^16 means the shares were inconsistent."""
    pieces = np.asarray(pieces)
    if pieces.size and int(pieces.max()) >= 1 << 16:
        raise ProtocolError("reconstructed value is not a valid secret encoding")
    return pieces.astype(">u2").tobytes()


def _check_points(points: Sequence[int] | np.ndarray) -> np.ndarray:
    pts = np.asarray(points)
    if pts.ndim != 1 or pts.dtype.kind not in "iu":
        raise ParameterError("Argument 'points' must be a 1-D integer array of evaluation points.")
    pts = pts.astype(np.int64)
    if pts.size and (int(pts.min()) < 1 or int(pts.max()) > MAX_HOLDERS):
        raise ParameterError(f"Argument 'points' must lie in [1, {MAX_HOLDERS}] (0 would reveal the secret).")
    if np.unique(pts).size != pts.size:
        raise ParameterError("Argument 'points' must be distinct.")
    return pts


def share(
    secrets: Sequence[bytes], *, threshold: int, points: Sequence[int] | np.ndarray, source: RandomSource | None = None
) -> np.ndarray:
    """Shares of all ``secrets`` at once: row i is holder ``points[i]``'s share vector (uint32, m pieces).

    f_j(x) = piece_j + sum_{k=1}^{t-1} c_{jk} x^k over GF(p), c uniform from ``source``.
    """
    pts = _check_points(points)
    t = check_int("threshold", threshold, lo=1, hi=max(1, pts.size))
    if pts.size < t:
        raise ParameterError(f"Argument 'points' must have at least threshold={t} entries, not {pts.size}.")
    exp, log = field()
    pieces = encode(secrets)
    coeffs = np.empty((t, pieces.size), dtype=np.int64)
    coeffs[0] = pieces
    if t > 1:
        coeffs[1:] = uniform_below(resolve_source(source), (t - 1) * pieces.size, PRIME).reshape(t - 1, -1)
    vander = exp[(log[pts][:, None] * np.arange(t)[None, :]) % _ORDER]  # V[i, k] = x_i^k
    return _matmul_mod(vander, coeffs).astype(np.uint32)


@lru_cache(maxsize=4096)
def lagrange_at_zero(points: tuple[int, ...]) -> npt.NDArray[np.int64]:
    """lambda_i = prod_{j != i} x_j / (x_j - x_i) over GF(p), so f(0) = sum_i lambda_i f(x_i). Cached."""
    exp, log = field()
    x = _check_points(points)
    diff = (x[None, :] - x[:, None]) % PRIME  # diff[i, j] = x_j - x_i, nonzero off the diagonal
    np.fill_diagonal(diff, 1)  # log 1 = 0: the diagonal drops out of the sums below
    # log lambda_i = sum_{j != i} log x_j - sum_{j != i} log (x_j - x_i)  (mod the group order)
    lam: npt.NDArray[np.int64] = exp[(log[x].sum() - log[x] - log[diff].sum(axis=1)) % _ORDER]
    lam.flags.writeable = False
    return lam


def reconstruct(points: Sequence[int] | np.ndarray, shares: np.ndarray, *, threshold: int) -> npt.NDArray[np.int64]:
    """Interpolate f(0) from the first ``threshold`` (point, share-row) pairs; returns the pieces (int64).

    ``shares`` has one row per point. Fewer than ``threshold`` rows raise ProtocolError: below the
    threshold the shares carry no information, so any output would be garbage.
    """
    pts = _check_points(points)
    t = check_int("threshold", threshold, lo=1)
    rows = np.asarray(shares)
    if rows.ndim != 2 or rows.shape[0] != pts.size:
        raise ParameterError("Argument 'shares' must be a 2-D array with one row per point.")
    if pts.size < t:
        raise ProtocolError(f"cannot reconstruct: {pts.size} shares received, threshold is {t}")
    if rows.size and int(rows.max()) >= PRIME:
        raise ProtocolError("share value outside GF(65537)")
    lam = lagrange_at_zero(tuple(int(p) for p in pts[:t]))
    result: npt.NDArray[np.int64] = _matmul_mod(lam[None, :], rows[:t].astype(np.int64))[0]
    return result
