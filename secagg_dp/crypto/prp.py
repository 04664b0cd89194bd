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
from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secagg_dp._validate import check_int
from secagg_dp.errors import ParameterError

__all__ = ["ROUNDS", "FeistelPermutation"]

ROUNDS = 10  # even (the pair returns to Z_a x Z_b); FF1's count (NIST SP 800-38G), >= 4 (Luby & Rackoff 1988)
_LABEL = b"secagg-dp/v3/ring-prp\x00"
_BLOCK = struct.Struct("<QQ")  # one round-function input block (i, R), as in _round_values
_SMALL = 16  # up to this many values the rounds run on Python ints (same blocks, same values): below it numpy's
# per-call overhead costs more than a Python loop per value (measured crossover 16-24 values; a client's own
# position is one value, its k + 1 share holders and 2k + 1 two-hop positions take the numpy pass)


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

    def _cipher(self) -> Callable[[bytes | bytearray], bytes]:
        """AES-256-ECB encryption of whole blocks under this permutation's key, for one evaluation (all its
        passes: ECB carries no state from one whole-block call to the next). A context per evaluation, not
        per object: a permutation may be shared by clients on several threads."""
        return Cipher(algorithms.AES(self._key), modes.ECB()).encryptor().update

    def _rounds_np(self, x: np.ndarray, inverse: bool, update: Callable[[bytes | bytearray], bytes]) -> np.ndarray:
        """One pass of the Feistel network on [0, a b) (or its inverse) for an int64 array: the round function
        F_i(R) is the first little-endian u64 of AES-256 on the block (i, R), reduced mod m_i. The halves stay
        uint64 (below 2^33, so no sum wraps) and the blocks are written in place into one buffer."""
        mod_a, mod_b = np.uint64(self.a), np.uint64(self.b)
        buf = bytearray(16 * x.size)
        blocks = np.frombuffer(buf, dtype="<u8").reshape(-1, 2)
        col_i, col_r = blocks[:, 0], blocks[:, 1]
        xu = x.astype(np.uint64)
        left, right = xu // mod_b, xu % mod_b
        for i in reversed(range(self.rounds)) if inverse else range(self.rounds):
            m = mod_a if i % 2 == 0 else mod_b
            col_i.fill(i)
            col_r[...] = left if inverse else right
            f = np.frombuffer(update(buf), dtype="<u8")[::2] % m
            if inverse:
                left, right = (right + m - f) % m, left
            else:
                left, right = right, (left + f) % m
        out: np.ndarray = (left * mod_b + right).astype(np.int64)
        return out

    def _rounds_small(self, xs: list[int], inverse: bool, update: Callable[[bytes | bytearray], bytes]) -> list[int]:
        """:meth:`_rounds_np` on a few values as Python ints: the same AES blocks (i, R) and the same
        arithmetic (Python's % and numpy's agree for a positive modulus), without numpy's per-call overhead."""
        a, b = self.a, self.b
        pack = _BLOCK.pack
        unpack = struct.Struct(f"<{2 * len(xs)}Q").unpack
        left, right = [v // b for v in xs], [v % b for v in xs]
        for i in reversed(range(self.rounds)) if inverse else range(self.rounds):
            m = a if i % 2 == 0 else b
            f = unpack(update(b"".join([pack(i, v) for v in (left if inverse else right)])))[::2]
            if inverse:
                left, right = [(r - w % m) % m for r, w in zip(right, f, strict=True)], left
            else:
                left, right = right, [(v + w % m) % m for v, w in zip(left, f, strict=True)]
        return [u * b + v for u, v in zip(left, right, strict=True)]

    def _walk(self, values: np.ndarray | list[int], step: str) -> np.ndarray:
        """pi (``step`` "forward") or pi^-1 of ``values``: a pass of the network on [0, a b), and another on
        each value that lands at or above n until it lands below (cycle walking, Black & Rogaway 2002, Sec. 4:
        it terminates, as x's cycle holds x < n)."""
        x = np.asarray(values, dtype=np.int64).reshape(-1)
        inverse = step != "forward"
        n = self.n
        update = self._cipher()
        if x.size <= _SMALL:
            xs = x.tolist()
            if xs and (min(xs) < 0 or max(xs) >= n):
                raise ParameterError(f"Argument 'values' must lie in [0, {n}).")
            ys = self._rounds_small(xs, inverse, update) if xs else []
            out = [j for j, v in enumerate(ys) if v >= n]
            while out:
                for j, v in zip(out, self._rounds_small([ys[j] for j in out], inverse, update), strict=True):
                    ys[j] = v
                out = [j for j in out if ys[j] >= n]
            return np.array(ys, dtype=np.int64)
        if int(x.min()) < 0 or int(x.max()) >= n:
            raise ParameterError(f"Argument 'values' must lie in [0, {n}).")
        y = self._rounds_np(x, inverse, update)
        back = np.asarray(y >= n).nonzero()[0]
        while back.size:
            y[back] = self._rounds_np(y[back], inverse, update)
            back = back[y[back] >= n]
        return y

    def forward(self, values: np.ndarray | list[int]) -> np.ndarray:
        """pi(values), element-wise (a new int64 array)."""
        return self._walk(values, "forward")

    def inverse(self, values: np.ndarray | list[int]) -> np.ndarray:
        """pi^-1(values), element-wise (a new int64 array)."""
        return self._walk(values, "inverse")
