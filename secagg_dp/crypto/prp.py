"""A keyed pseudorandom permutation of an arbitrary integer domain [0, n): the SecAgg+ ring layout.

Construction (Black & Rogaway 2002, "Ciphers with arbitrary finite domains"): a generalised Feistel
network on Z_a x Z_b with a = ceil(sqrt(n)), b = ceil(n / a) (their FE2; a b - n < a), turned into a
permutation of [0, n) by cycle walking (their Sec. 4: re-encipher until the value lands below n). x is
split as (L, R) = (x div b, x mod b); round i maps (L, R) to (R, (L + F_i(R)) mod m_i) with m_i = a for
even i and b for odd i, so after an even number of rounds the pair is back in Z_a x Z_b (Luby & Rackoff
1988 for the Feistel shape). The round function F_i(R) is the first 64 bits of AES-256 under the key
K = SHA-256(label || seed || n) on the block (i, R), reduced mod m_i (bias at most m_i / 2^64 <= 2^-32).

Cost: ``ROUNDS`` AES blocks per value (plus a walk, needed with probability < 1/b ~ n^-1/2 per step), so
evaluating k values costs O(k), whatever n. Both directions are vectorised over numpy arrays.

Randomness: used with a public key (the graph seed), the permutation is modelled as a uniformly random
permutation of [0, n), as format-preserving encryption is (NIST SP 800-38G's FF1 is a 10-round Feistel of
this shape). This is an assumption, not a theorem: the information-theoretic Feistel bounds (Luby &
Rackoff 1988: advantage <= q^2 / 2^h for q queries and h-bit halves) say nothing once q approaches
sqrt(n), which is where a client's q = k + 1 evaluations sit for n < k^4. See docs/secure-aggregation.md.
"""

from __future__ import annotations

import hashlib
import math
import struct

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes

from secagg_dp._validate import check_int
from secagg_dp.errors import ParameterError

__all__ = ["ROUNDS", "FeistelPermutation"]

ROUNDS = 10  # even (the pair returns to Z_a x Z_b); FF1's count (NIST SP 800-38G), >= 4 (Luby & Rackoff 1988)
_LABEL = b"secagg-dp/v3/ring-prp\x00"
_BLOCK = struct.Struct("<QQ")  # one round-function input block (i, R), as in _round_values
_SMALL = 64  # up to this many values (a client's O(k) look-ups) the rounds run on Python ints: same blocks,
# same values, without numpy's per-call overhead on tiny arrays


class FeistelPermutation:
    """The permutation pi of [0, n) keyed by the 32-byte ``seed``: :meth:`forward` is pi, :meth:`inverse`
    is pi^-1, each on an int64 array of values in [0, n) (out-of-range values raise ParameterError)."""

    def __init__(self, n: int, seed: bytes, *, rounds: int = ROUNDS) -> None:
        self.n = check_int("n", n, lo=1)
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
            raise ParameterError(f"Argument 'seed' must be 32 bytes, not {seed!r:.40}.")
        self.rounds = check_int("rounds", rounds, lo=4)
        if self.rounds % 2:
            raise ParameterError(f"Argument 'rounds' must be even, not {rounds}.")
        self.a = math.isqrt(n - 1) + 1  # ceil(sqrt(n))
        self.b = -(-n // self.a)
        self._key = hashlib.sha256(_LABEL + bytes(seed) + n.to_bytes(8, "big")).digest()

    def __repr__(self) -> str:
        return f"FeistelPermutation(n={self.n}, rounds={self.rounds})"

    def _round_values(self, enc: CipherContext, i: int, r: np.ndarray, m: int) -> np.ndarray:
        """F_i(r) mod m for an int64 array r: AES-256 on the blocks (i, r) (two little-endian u64 each)."""
        blocks = np.empty((r.size, 2), dtype="<u8")
        blocks[:, 0] = i
        blocks[:, 1] = r
        out = np.frombuffer(enc.update(blocks.tobytes()), dtype="<u8")[::2]
        vals: np.ndarray = (out % np.uint64(m)).astype(np.int64)
        return vals

    def _rounds_small(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        """:meth:`_encipher` (or :meth:`_decipher` if ``inverse``) on a few values, with Python ints: the
        same AES blocks (i, R) and the same arithmetic (Python's % and numpy's agree for a positive modulus)."""
        a, b = self.a, self.b
        update = Cipher(algorithms.AES(self._key), modes.ECB()).encryptor().update
        pack = _BLOCK.pack
        unpack = struct.Struct(f"<{2 * x.size}Q").unpack
        xs = x.tolist()
        left, right = [v // b for v in xs], [v % b for v in xs]
        for i in reversed(range(self.rounds)) if inverse else range(self.rounds):
            m = a if i % 2 == 0 else b
            f = unpack(update(b"".join([pack(i, v) for v in (left if inverse else right)])))[::2]
            if inverse:
                left, right = [(r - w % m) % m for r, w in zip(right, f, strict=True)], left
            else:
                left, right = right, [(v + w % m) % m for v, w in zip(left, f, strict=True)]
        return np.array([u * b + v for u, v in zip(left, right, strict=True)], dtype=np.int64)

    def _encipher(self, x: np.ndarray) -> np.ndarray:
        """One pass of the Feistel network on [0, a b)."""
        if x.size <= _SMALL:
            return self._rounds_small(x, False)
        a, b = self.a, self.b
        enc = Cipher(algorithms.AES(self._key), modes.ECB()).encryptor()
        left, right = x // b, x % b
        for i in range(self.rounds):
            m = a if i % 2 == 0 else b
            left, right = right, (left + self._round_values(enc, i, right, m)) % m
        out: np.ndarray = left * b + right
        return out

    def _decipher(self, y: np.ndarray) -> np.ndarray:
        """The inverse pass on [0, a b)."""
        if y.size <= _SMALL:
            return self._rounds_small(y, True)
        a, b = self.a, self.b
        enc = Cipher(algorithms.AES(self._key), modes.ECB()).encryptor()
        left, right = y // b, y % b
        for i in reversed(range(self.rounds)):
            m = a if i % 2 == 0 else b
            left, right = (right - self._round_values(enc, i, left, m)) % m, left
        out: np.ndarray = left * b + right
        return out

    def _walk(self, values: np.ndarray | list[int], step: str) -> np.ndarray:
        x = np.asarray(values, dtype=np.int64).reshape(-1)
        if x.size and (int(x.min()) < 0 or int(x.max()) >= self.n):
            raise ParameterError(f"Argument 'values' must lie in [0, {self.n}).")
        fn = self._encipher if step == "forward" else self._decipher
        y = fn(x) if x.size else x.copy()
        out = np.asarray(y >= self.n).nonzero()[0]
        while out.size:  # cycle walking (Black & Rogaway 2002, Sec. 4): terminates, x's cycle holds x < n
            y[out] = fn(y[out])
            out = out[y[out] >= self.n]
        return y

    def forward(self, values: np.ndarray | list[int]) -> np.ndarray:
        """pi(values), element-wise (a new int64 array)."""
        return self._walk(values, "forward")

    def inverse(self, values: np.ndarray | list[int]) -> np.ndarray:
        """pi^-1(values), element-wise (a new int64 array)."""
        return self._walk(values, "inverse")
