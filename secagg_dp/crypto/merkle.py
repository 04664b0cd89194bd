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

:class:`MerkleSumTree` is the same tree with a count in every node (a Merkle sum tree): a leaf over ``data`` that
stands for ``count`` units is SHA-256(0x10 || count || data), an inner node SHA-256(0x11 || count || left ||
right) with count the sum of its children's, padding SHA-256(0x12) with count 0 (counts big-endian uint32). The
prefixes 0x10-0x12 keep its nodes apart from the plain tree's 0x00-0x02 (a sum-tree node is never read as a
roster leaf or node). A verifier of a multiproof recomputes every count on its paths and checks each node count
against the node's capacity (the units under it), so the root's count is the sum of leaf counts of one tree
consistent with every leaf anyone verified, and never more than the units the tree covers
(:func:`verify_sum_multiproof`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import TypeVar

from secagg_dp.errors import ParameterError, ProtocolError

__all__ = [
    "HASH_LEN",
    "leaf_hash",
    "node_hash",
    "MerkleTree",
    "verify_multiproof",
    "depth_for",
    "SumNode",
    "sum_leaf_hash",
    "sum_node_hash",
    "MerkleSumTree",
    "verify_sum_multiproof",
]

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


_Node = TypeVar("_Node")


def _multiproof(levels: Sequence[Sequence[_Node]], n: int, indices: Sequence[int]) -> list[_Node]:
    """The siblings proving the leaves at ``indices`` (any order, duplicates ignored) of the n-leaf tree kept
    level by level in ``levels`` (leaves first), level by level from the leaves up and left to right; subtrees
    made only of padding are left out (module docstring). Shared by the plain and the sum tree."""
    known = sorted(set(int(i) for i in indices))
    if not known or known[0] < 0 or known[-1] >= n:
        raise ParameterError(f"Argument 'indices' must be non-empty and within [0, {n}).")
    proof: list[_Node] = []
    for height, level in enumerate(levels[:-1]):
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
        return _multiproof(self.levels, self.n, indices)


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


# -- Merkle sum tree ------------------------------------------------------------------------------------------
SumNode = tuple[int, bytes]  #: (count, hash) of a node of a :class:`MerkleSumTree`
_MAX_COUNT = 0xFFFFFFFF
_SUM_EMPTY = hashlib.sha256(b"\x12").digest()
_SUM_EMPTY_AT = [_SUM_EMPTY]  # _SUM_EMPTY_AT[l]: root of a subtree of 2^l padding leaves (count 0)
for _ in range(64):
    _SUM_EMPTY_AT.append(hashlib.sha256(b"\x11" + bytes(4) + _SUM_EMPTY_AT[-1] + _SUM_EMPTY_AT[-1]).digest())
_U32 = struct.Struct(">I")


def _check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= _MAX_COUNT:
        raise ParameterError(f"Argument 'count' must be an int in [0, 2^32 - 1], not {count!r}.")
    return count


def sum_leaf_hash(count: int, data: bytes) -> bytes:
    """SHA-256(0x10 || count || data), count a big-endian uint32: a sum-tree leaf standing for ``count`` units."""
    return hashlib.sha256(b"\x10" + _U32.pack(_check_count(count)) + bytes(data)).digest()


def sum_node_hash(count: int, left: bytes, right: bytes) -> bytes:
    """SHA-256(0x11 || count || left || right): a sum-tree inner node whose children's counts add to ``count``."""
    return hashlib.sha256(b"\x11" + _U32.pack(_check_count(count)) + left + right).digest()


class MerkleSumTree:
    """The whole sum tree over ``leaves``, each (count, leaf hash from :func:`sum_leaf_hash`), level by level.

    The leaf hash must commit to the same count as given here (a tree built otherwise is one an honest verifier
    who sees that leaf refuses). Padding leaves are (0, SHA-256(0x12)); the root's count is the sum of the leaf
    counts, refused above 2^32 - 1."""

    def __init__(self, leaves: Sequence[SumNode]) -> None:
        n = len(leaves)
        d = depth_for(n)
        for c, h in leaves:
            _check_count(c)
            if not isinstance(h, bytes) or len(h) != HASH_LEN:
                raise ParameterError("Argument 'leaves' must hold (count, 32-byte leaf hash) pairs.")
        level: list[SumNode] = list(leaves) + [(0, _SUM_EMPTY)] * ((1 << d) - n)
        self.n = n
        self.levels: list[list[SumNode]] = [level]
        while len(level) > 1:
            nxt: list[SumNode] = []
            for i in range(0, len(level), 2):
                (cl, hl), (cr, hr) = level[i], level[i + 1]
                nxt.append((cl + cr, sum_node_hash(cl + cr, hl, hr)))
            level = nxt
            self.levels.append(level)

    @property
    def root(self) -> bytes:
        return self.levels[-1][0][1]

    @property
    def count(self) -> int:
        """The root's count: the sum of the leaf counts."""
        return self.levels[-1][0][0]

    def multiproof(self, indices: Sequence[int]) -> list[SumNode]:
        """The siblings (count, hash) proving the leaves at ``indices``, in the order of
        :meth:`MerkleTree.multiproof` (all-padding siblings are implicit)."""
        return _multiproof(self.levels, self.n, indices)


def verify_sum_multiproof(
    root: bytes, n: int, leaves: dict[int, SumNode], proof: Sequence[SumNode], *, unit: int, total: int
) -> int:
    """Check that ``leaves`` (index -> (count, leaf hash)) sit at those indices of the n-leaf sum tree with
    ``root``, using ``proof`` from :meth:`MerkleSumTree.multiproof`, and return the root's count.

    Leaf i covers the units [i * unit, min((i + 1) * unit, total)) (so n = ceil(total / unit)); a node's
    capacity is the number of units under it. Every count the verifier meets, its own leaves' and every
    sibling's, must be at most its node's capacity, and every node on its paths gets the sum of its children's
    counts. Hence the returned count is at most ``total``, and it is the sum of the leaf counts of a tree that
    agrees with every leaf any verifier of the same root checked (collision resistance of SHA-256): a count
    can only be attached to units no such verifier saw. Any mismatch raises ProtocolError."""
    if unit < 1 or total < 1 or n != -(-total // unit):
        raise ProtocolError(f"sum tree of {n} leaves does not cover {total} units of {unit}")
    d = depth_for(n)

    def capacity(height: int, i: int) -> int:
        lo = (i * unit) << height
        return max(0, min(total, lo + (unit << height)) - lo)

    if not leaves or min(leaves) < 0 or max(leaves) >= n:
        raise ProtocolError(f"membership proof names leaves outside [0, {n})")
    idx = sorted(leaves)
    nodes = [leaves[i] for i in idx]
    for i, (c, _) in zip(idx, nodes, strict=True):
        if not 0 <= c <= capacity(0, i):
            raise ProtocolError(f"sum-tree leaf {i} counts {c}, more than the {capacity(0, i)} units it covers")
    used, nproof = 0, len(proof)
    for height in range(d):
        nidx: list[int] = []
        nnodes: list[SumNode] = []
        t, size = 0, len(idx)
        while t < size:
            i = idx[t]
            if not i & 1 and t + 1 < size and idx[t + 1] == i + 1:
                left, right = nodes[t], nodes[t + 1]
                t += 2
            else:
                if (i ^ 1) << height >= n:
                    sib: SumNode = (0, _SUM_EMPTY_AT[height])  # a subtree of padding only
                else:
                    if used == nproof:
                        raise ProtocolError("membership proof is too short")
                    sib = proof[used]
                    used += 1
                    cap = capacity(height, i ^ 1)
                    if not 0 <= sib[0] <= cap:
                        raise ProtocolError(
                            f"sum-tree node counts {sib[0]}, more than the {cap} units under it (height {height})"
                        )
                left, right = (nodes[t], sib) if not i & 1 else (sib, nodes[t])
                t += 1
            count = left[0] + right[0]
            nidx.append(i >> 1)
            nnodes.append((count, hashlib.sha256(b"\x11" + _U32.pack(count) + left[1] + right[1]).digest()))
        idx, nodes = nidx, nnodes
    if used != nproof:
        raise ProtocolError("membership proof has unused hashes")
    if idx != [0] or nodes[0][1] != root:
        raise ProtocolError("membership proof does not lead to the committed root")
    return nodes[0][0]
