"""Pseudorandom generator: AES-256-CTR keystream from a full 32-byte seed, mapped to exactly uniform Z_q.

For q = 2^b the keystream is read as little-endian words of w bits (w = 32 for b <= 32, else 64) and the
low b bits are kept: q divides 2^w, so each residue is exactly uniform (given a uniform keystream). Since q
also divides 2^w, sums of *unreduced* words taken modulo 2^w (native uint32/uint64 wrap-around) and reduced
once at the end equal the sum of the reduced masks; :func:`accumulate_mask` uses this to add a mask at the
cost of one keystream and one same-dtype numpy add, in cache-sized chunks (:class:`MaskStream` continues one
stream block by block). Other moduli use rejection sampling (:func:`uniform_mod`).

Each seed keys exactly one stream (fixed all-zero initial counter block); callers derive a fresh seed per
purpose and round (HKDF, see :mod:`secagg_dp.crypto.kdf`) so no (key, counter) pair is ever reused.
"""

from __future__ import annotations

import functools

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes

from secagg_dp._validate import check_int
from secagg_dp.crypto.randomness import rejection_uniform
from secagg_dp.errors import ParameterError
from secagg_dp.zq import check_bits

__all__ = ["SEED_LEN", "keystream", "word_dtype", "accumulate_mask", "expand_mask", "uniform_mod", "MaskStream"]

SEED_LEN = 32
_AES = algorithms.AES  # bound once: the algorithms module resolves attributes through a deprecation hook
_CTR0 = modes.CTR(bytes(16))  # the all-zero initial counter block (an immutable mode object, shared)
_CHUNK_ELEMS = 1 << 15  # 128-256 KiB of keystream per chunk: stays in L2 between AES and the add


def _encryptor(seed: bytes) -> CipherContext:
    if type(seed) is bytes and len(seed) == SEED_LEN:  # the common case: no checks to redo, no copy
        return Cipher(_AES(seed), _CTR0).encryptor()
    if not isinstance(seed, (bytes, bytearray)):
        raise TypeError(f"Argument 'seed' must be bytes, not {type(seed).__name__}.")
    if len(seed) != SEED_LEN:
        raise ParameterError(f"Argument 'seed' must be exactly {SEED_LEN} bytes, not {len(seed)}.")
    return Cipher(_AES(bytes(seed)), _CTR0).encryptor()


@functools.lru_cache(maxsize=8)
def _zeros(nbytes: int) -> bytes:
    """An immutable all-zero plaintext of ``nbytes`` (one per mask size, not one per mask)."""
    return bytes(nbytes)


def keystream(seed: bytes, nbytes: int) -> bytes:
    """The first ``nbytes`` of the AES-256-CTR keystream under ``seed`` (all-zero initial counter)."""
    nbytes = check_int("nbytes", nbytes, lo=0)
    return _encryptor(seed).update(bytes(nbytes))


def word_dtype(bits: int) -> np.dtype:
    """Keystream word type used for Z_{2^bits}: uint32 if bits <= 32, else uint64 (little-endian)."""
    return np.dtype("<u4") if check_bits(bits) <= 32 else np.dtype("<u8")


def accumulate_mask(acc: np.ndarray, seed: bytes, bits: int, *, sign: int = 1) -> np.ndarray:
    """In place: ``acc += sign * PRG(seed)`` modulo 2^w (reduce with ``& (2^bits - 1)`` when done).

    ``acc`` must be a contiguous 1-D array of dtype ``word_dtype(bits)`` (uint32 for bits <= 32, else
    uint64); ``sign`` is +1 or -1. Returns ``acc``.
    """
    dt = word_dtype(bits)
    if not isinstance(acc, np.ndarray) or acc.dtype != dt or acc.ndim != 1 or not acc.flags.c_contiguous:
        raise ParameterError(f"Argument 'acc' must be a contiguous 1-D {dt} array for bits={bits}.")
    if sign not in (1, -1):
        raise ParameterError(f"Argument 'sign' must be +1 or -1, not {sign!r}.")
    enc = _encryptor(seed)
    n = acc.size
    chunk = min(n, _CHUNK_ELEMS)
    zeros = _zeros(chunk * dt.itemsize)
    buf = bytearray(chunk * dt.itemsize + 15)  # update_into needs len(data) + block_size - 1
    words_all = np.frombuffer(buf, dtype=dt, count=chunk)
    op = np.add if sign == 1 else np.subtract
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        m = stop - start
        enc.update_into(zeros[: m * dt.itemsize] if m != chunk else zeros, buf)
        op(acc[start:stop], words_all[:m], out=acc[start:stop])
    return acc


class MaskStream:
    """PRG(seed) consumed block by block: successive :meth:`accumulate` calls add (or subtract) the next
    ``acc.size`` words of the same stream, so a vector masked in consecutive blocks equals
    :func:`accumulate_mask` on the whole vector, while only one block of keystream exists at a time."""

    __slots__ = ("_enc", "_dt")

    def __init__(self, seed: bytes, bits: int) -> None:
        self._dt = word_dtype(bits)
        self._enc = _encryptor(seed)

    def accumulate(self, acc: np.ndarray, *, sign: int = 1) -> np.ndarray:
        """In place: ``acc += sign * (next acc.size words of the stream)`` modulo 2^w; returns ``acc``."""
        if not isinstance(acc, np.ndarray) or acc.dtype != self._dt or acc.ndim != 1:
            raise ParameterError(f"Argument 'acc' must be a 1-D {self._dt} array.")
        words = np.frombuffer(self._enc.update(_zeros(acc.size * self._dt.itemsize)), dtype=self._dt)
        (np.add if sign == 1 else np.subtract)(acc, words, out=acc)
        return acc


def expand_mask(seed: bytes, length: int, bits: int) -> np.ndarray:
    """PRG(seed) as ``length`` exactly uniform residues in Z_{2^bits} (uint64)."""
    length = check_int("length", length, lo=0)
    bits = check_bits(bits)
    acc = np.zeros(length, dtype=word_dtype(bits))
    accumulate_mask(acc, seed, bits)
    return acc.astype(np.uint64) & np.uint64((1 << bits) - 1)


def uniform_mod(seed: bytes, length: int, q: int) -> np.ndarray:
    """PRG(seed) as ``length`` exactly uniform residues in Z_q for any 2 <= q <= 2^62, by rejection sampling.

    Candidates are the low bitlen(q - 1) bits of successive 64-bit keystream words; those >= q are
    discarded and the stream continues, so every residue, including q - 1, has probability exactly 1/q.
    """
    length = check_int("length", length, lo=0)
    q = check_int("q", q, lo=2, hi=1 << 62)
    enc = _encryptor(seed)
    return rejection_uniform(lambda n: enc.update(bytes(n)), length, q)  # keystream: AES-CTR of zeros
