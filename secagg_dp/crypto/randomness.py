"""Sources of cryptographic randomness for keys, self-mask seeds, Shamir coefficients and nonces.

:class:`OsRandom` reads ``os.urandom`` (the default everywhere). :class:`SeededRandom` is an AES-256-CTR
keystream under a fixed key: it makes whole protocol runs reproducible **for simulation only**; anyone who
knows the seed knows every key of the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secagg_dp._validate import check_int
from secagg_dp.errors import ParameterError

__all__ = ["RandomSource", "OsRandom", "SeededRandom", "uniform_below", "resolve_source"]


@runtime_checkable
class RandomSource(Protocol):
    """Anything with ``bytes(n) -> bytes`` returning n cryptographically strong random bytes."""

    def bytes(self, n: int) -> bytes: ...


class OsRandom:
    """Randomness from the operating system (``os.urandom``)."""

    __slots__ = ()

    def bytes(self, n: int) -> bytes:
        return os.urandom(check_int("n", n, lo=0))

    def __repr__(self) -> str:
        return "OsRandom()"


class SeededRandom:
    """Deterministic AES-256-CTR stream keyed by a 32-byte key. Simulation only; the key is not in ``repr``."""

    __slots__ = ("_enc",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise ParameterError("Argument 'key' must be 32 bytes.")
        self._enc = Cipher(algorithms.AES(bytes(key)), modes.CTR(bytes(16))).encryptor()

    def bytes(self, n: int) -> bytes:
        return self._enc.update(bytes(check_int("n", n, lo=0)))

    def __repr__(self) -> str:
        return "SeededRandom(<key hidden>)"


def resolve_source(source: RandomSource | None) -> RandomSource:
    """``None`` -> :class:`OsRandom`; otherwise check the object has a ``bytes`` method."""
    if source is None:
        return OsRandom()
    if type(source) in (OsRandom, SeededRandom):  # fast path: Protocol isinstance checks are slow
        return source
    if not isinstance(source, RandomSource):
        raise TypeError(f"Argument 'source' must provide bytes(n), not {type(source).__name__}.")
    return source


def rejection_uniform(read: Callable[[int], bytes], count: int, q: int) -> np.ndarray:
    """``count`` exactly uniform integers in [0, q) as uint64 from the random bytes ``read(n)`` returns (q >= 2
    checked by the caller): each candidate is the low L = bitlen(q - 1) bits of a little-endian 64-bit word,
    candidates >= q are rejected (acceptance probability q / 2^L > 1/2) and the stream continues."""
    low = np.uint64((1 << (q - 1).bit_length()) - 1)
    out = np.empty(count, dtype=np.uint64)
    filled = 0
    while filled < count:
        need = count - filled
        draw = need + need // 2 + 16
        words = np.frombuffer(read(8 * draw), dtype="<u8") & low
        ok = words[words < np.uint64(q)][:need]
        out[filled : filled + ok.size] = ok
        filled += ok.size
    return out


def uniform_below(source: RandomSource, count: int, q: int) -> np.ndarray:
    """``count`` exactly uniform integers in [0, q) as uint64, 2 <= q <= 2^63, by rejection sampling.

    Each candidate is the low L = bitlen(q - 1) bits of a 64-bit random word; candidates >= q are
    rejected (acceptance probability q / 2^L > 1/2), so no residue is favoured and q - 1 does occur.
    """
    count = check_int("count", count, lo=0)
    q = check_int("q", q, lo=2, hi=1 << 63)
    return rejection_uniform(source.bytes, count, q)
