"""A SHA-256 Merkle tree with domain-separated hashing and multiproofs (membership of several leaves at once).

Leaf i of n is hashed as SHA-256(0x00 || data_i), an inner node as SHA-256(0x01 || left || right), and the
tree is padded to 2^D leaves (D = ceil(log2 n)) with SHA-256(0x02). The prefixes keep a leaf from being
read as an inner node (the second-preimage attack on unprefixed trees, RFC 6962 Sec. 2.1) and a padding
slot from being read as either. The root alone does not fix n: callers bind n next to the root (the roster
statement of :mod:`protocols.graph` hashes both), and a verifier only accepts indices below n.

A multiproof for a set S of leaves lists, level by level from the leaves up and left to right, the sibling
hashes that cannot be computed from S: for s leaves spread over a tree of depth D that is fewer than
s * (D - floor(log2 s) + 2) hashes (at most s per level, and at most 2^(D - l) at level l), and at most
2 * D for a contiguous range. Subtrees made only of padding are never
sent (both sides know them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from secagg_dp.errors import ParameterError, ProtocolError

__all__ = ["HASH_LEN", "leaf_hash", "node_hash", "MerkleTree", "verify_multiproof", "depth_for"]

HASH_LEN = 32
_EMPTY = hashlib.sha256(b"\x02").digest()
_EMPTY_AT = [_EMPTY]  # _EMPTY_AT[l]: root of a subtree of 2^l padding leaves
for _ in range(64):
    _EMPTY_AT.append(hashlib.sha256(b"\x01" + _EMPTY_AT[-1] + _EMPTY_AT[-1]).digest())


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + bytes(data)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def depth_for(n: int) -> int:
    """Depth D of a tree of n >= 1 leaves: the smallest D with 2^D >= n."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ParameterError(f"Argument 'n' must be an int >= 1, not {n!r}.")
    return (n - 1).bit_length()


class MerkleTree:
    """The whole tree over ``leaves`` (already hashed with :func:`leaf_hash`), kept level by level."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        n = len(leaves)
        d = depth_for(n)
        level = list(leaves) + [_EMPTY] * ((1 << d) - n)
        if any(not isinstance(h, bytes) or len(h) != HASH_LEN for h in leaves):
            raise ParameterError("Argument 'leaves' must hold 32-byte leaf hashes.")
        self.n = n
        self.levels: list[list[bytes]] = [level]
        while len(level) > 1:
            level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
            self.levels.append(level)

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    def multiproof(self, indices: Sequence[int]) -> list[bytes]:
        """The sibling hashes proving the leaves at ``indices`` (any order, duplicates ignored)."""
        known = sorted(set(int(i) for i in indices))
        if not known or known[0] < 0 or known[-1] >= self.n:
            raise ParameterError(f"Argument 'indices' must be non-empty and within [0, {self.n}).")
        proof: list[bytes] = []
        n = self.n
        for height, level in enumerate(self.levels[:-1]):
            # ``known`` ascends, so a node's sibling, if known, is its neighbour in the list: one linear pass
            nxt: list[int] = []
            t, size = 0, len(known)
            while t < size:
                i = known[t]
                if not i & 1 and t + 1 < size and known[t + 1] == i + 1:
                    t += 2  # both children known
                else:
                    if (i ^ 1) << height < n:  # all-padding siblings are implicit
                        proof.append(level[i ^ 1])
                    t += 1
                if not nxt or nxt[-1] != i >> 1:
                    nxt.append(i >> 1)
            known = nxt
        return proof


def verify_multiproof(root: bytes, n: int, leaves: dict[int, bytes], proof: Sequence[bytes]) -> None:
    """Check that ``leaves`` (index -> leaf hash) sit at those indices of the n-leaf tree with ``root``,
    using ``proof`` from :meth:`MerkleTree.multiproof`; any mismatch raises ProtocolError."""
    d = depth_for(n)
    if not leaves or min(leaves) < 0 or max(leaves) >= n:
        raise ProtocolError(f"membership proof names leaves outside [0, {n})")
    idx = sorted(leaves)
    hs = [leaves[i] for i in idx]
    sibs = list(proof)
    nproof = len(sibs)
    used = 0
    sha = hashlib.sha256
    for height in range(d):
        # ``idx`` ascends, so a node's sibling, if known, is its neighbour in the list: one linear pass
        nidx: list[int] = []
        nhs: list[bytes] = []
        add_i, add_h = nidx.append, nhs.append
        limit = n >> height if not n & ((1 << height) - 1) else (n >> height) + 1  # (i ^ 1) << height < n
        t, size = 0, len(idx)
        while t < size:
            i = idx[t]
            if not i & 1 and t + 1 < size and idx[t + 1] == i + 1:
                left, right = hs[t], hs[t + 1]  # the pair combines at its left member
                t += 2
            else:
                if i ^ 1 >= limit:
                    sib = _EMPTY_AT[height]  # a subtree of padding only
                else:
                    if used == nproof:
                        raise ProtocolError("membership proof is too short")
                    sib = sibs[used]
                    used += 1
                left, right = (hs[t], sib) if not i & 1 else (sib, hs[t])
                t += 1
            add_i(i >> 1)
            add_h(sha(b"\x01" + left + right).digest())  # node_hash(left, right)
        idx, hs = nidx, nhs
    if used != nproof:
        raise ProtocolError("membership proof has unused hashes")
    if idx != [0] or hs[0] != root:
        raise ProtocolError("membership proof does not lead to the committed root")
