"""The roster commitment's Merkle tree: roots against hand-written SHA-256 compositions, multiproofs accepted
for every subset tried and refused when any part is altered."""

from __future__ import annotations

import hashlib
import random

import pytest

from secagg_dp.crypto.merkle import MerkleTree, depth_for, leaf_hash, verify_multiproof
from secagg_dp.errors import ProtocolError


def _h(*parts: bytes) -> bytes:
    return hashlib.sha256(b"".join(parts)).digest()


def _leaves(n: int) -> list[bytes]:
    return [leaf_hash(b"entry %d" % i) for i in range(n)]


def test_roots_are_the_documented_compositions():
    # Leaf: H(0x00 || data); node: H(0x01 || left || right); padding leaf: H(0x02); written out by hand.
    a, b, c = (_h(b"\x00", d) for d in (b"a", b"b", b"c"))
    pad = _h(b"\x02")
    assert MerkleTree([a]).root == a
    assert MerkleTree([a, b]).root == _h(b"\x01", a, b)
    assert MerkleTree([a, b, c]).root == _h(b"\x01", _h(b"\x01", a, b), _h(b"\x01", c, pad))
    assert leaf_hash(b"a") == a and [depth_for(n) for n in (1, 2, 3, 4, 5)] == [0, 1, 2, 2, 3]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 9, 100, 1000])
def test_multiproofs_verify_for_random_subsets(n):
    leaves = _leaves(n)
    tree = MerkleTree(leaves)
    rng = random.Random(n)
    for _ in range(25):
        idx = rng.sample(range(n), rng.randint(1, min(n, 40)))
        verify_multiproof(tree.root, n, {i: leaves[i] for i in idx}, tree.multiproof(idx))
    assert tree.multiproof(range(n)) == []  # every leaf known: the root is recomputed from them alone


@pytest.mark.parametrize("n", [9, 1000, 4097])
def test_a_contiguous_range_needs_at_most_two_hashes_per_level(n):
    tree = MerkleTree(_leaves(n))
    for start in (0, n // 3, n - 33):
        assert len(tree.multiproof(range(max(0, start), min(n, start + 33)))) <= 2 * depth_for(n)


def test_altered_proofs_leaves_and_indices_are_refused():
    n = 100
    leaves = _leaves(n)
    tree = MerkleTree(leaves)
    idx = [3, 4, 50, 99]
    proof = tree.multiproof(idx)
    known = {i: leaves[i] for i in idx}
    bad_hash = [proof[0][:-1] + bytes([proof[0][-1] ^ 1]), *proof[1:]]
    for args in [
        (tree.root, n, known, bad_hash),  # one proof hash altered
        (tree.root, n, {**known, 50: leaves[51]}, proof),  # another entry at index 50
        (tree.root, n, {3: leaves[3], 5: leaves[4], 50: leaves[50], 99: leaves[99]}, proof),  # moved
        (tree.root, n, known, proof[:-1]),  # too short
        (tree.root, n, known, [*proof, proof[0]]),  # too long
        (tree.root, n + 1, known, proof),  # another size (and depth)
        (tree.root, n, {**known, 100: leaves[0]}, proof),  # beyond the roster
        (MerkleTree(_leaves(n + 1)).root, n, known, proof),  # another root
    ]:
        with pytest.raises(ProtocolError):
            verify_multiproof(*args)


def _proof_by_sets(tree: MerkleTree, indices) -> list[bytes]:
    # The documented order written with sets: level by level from the leaves up, left to right, every
    # sibling not computable from the known nodes and not a subtree of padding only.
    known, proof = set(indices), []
    for height, level in enumerate(tree.levels[:-1]):
        proof += [level[i ^ 1] for i in sorted(known) if i ^ 1 not in known and (i ^ 1) << height < tree.n]
        known = {i >> 1 for i in known}
    return proof


@pytest.mark.parametrize("n", [2, 3, 7, 64, 1000, 4097])
def test_multiproof_order_is_the_documented_one(n):
    leaves = _leaves(n)
    tree = MerkleTree(leaves)
    rng = random.Random(7 * n)
    for _ in range(20):
        idx = rng.sample(range(n), rng.randint(1, min(n, 70)))
        assert tree.multiproof(idx) == _proof_by_sets(tree, idx)
        proof = tree.multiproof(idx)
        verify_multiproof(tree.root, n, {i: leaves[i] for i in idx}, proof)
        if proof:  # one hash short, one too many
            with pytest.raises(ProtocolError):
                verify_multiproof(tree.root, n, {i: leaves[i] for i in idx}, proof[:-1])
        with pytest.raises(ProtocolError):
            verify_multiproof(tree.root, n, {i: leaves[i] for i in idx}, [*proof, proof[0] if proof else b"x" * 32])


# -- the Merkle sum tree (survivor-count commitment) ----------------------------------------------------------
def _u32(c: int) -> bytes:
    return c.to_bytes(4, "big")


def test_sum_tree_roots_are_the_documented_compositions():
    # Leaf: H(0x10 || count || data); node: H(0x11 || count || left || right), count = sum of the children's;
    # padding: H(0x12) with count 0; written out by hand with hashlib.
    from secagg_dp.crypto.merkle import MerkleSumTree, sum_leaf_hash

    a, b, c = (_h(b"\x10", _u32(k), d) for k, d in ((3, b"a"), (0, b"b"), (5, b"c")))
    pad = _h(b"\x12")
    assert sum_leaf_hash(3, b"a") == a
    tree = MerkleSumTree([(3, a), (0, b), (5, c)])
    left, right = _h(b"\x11", _u32(3), a, b), _h(b"\x11", _u32(5), c, pad)
    assert tree.root == _h(b"\x11", _u32(8), left, right) and tree.count == 8
    # domain-separated from the roster tree: the same data never gives the same leaf or node
    assert sum_leaf_hash(0, b"") != leaf_hash(b"") and MerkleTree([a, b]).root != MerkleSumTree([(0, a), (0, b)]).root


@pytest.mark.parametrize(("total", "unit"), [(1, 4), (7, 4), (16, 4), (37, 4), (1000, 8)])
def test_sum_multiproofs_return_the_sum_of_the_leaf_counts(total, unit):
    # Oracle: the sum of the counts drawn here (no tree code involved).
    from secagg_dp.crypto.merkle import MerkleSumTree, sum_leaf_hash, verify_sum_multiproof

    rng = random.Random(total)
    n = -(-total // unit)
    caps = [min(unit, total - i * unit) for i in range(n)]
    counts = [rng.randint(0, cap) for cap in caps]
    leaves = [(c, sum_leaf_hash(c, b"chunk %d" % i)) for i, c in enumerate(counts)]
    tree = MerkleSumTree(leaves)
    assert tree.count == sum(counts)
    for _ in range(20):
        idx = rng.sample(range(n), rng.randint(1, n))
        got = verify_sum_multiproof(
            tree.root, n, {i: leaves[i] for i in idx}, tree.multiproof(idx), unit=unit, total=total
        )
        assert got == sum(counts)


def test_sum_proofs_refuse_counts_beyond_capacity_and_altered_counts():
    from secagg_dp.crypto.merkle import MerkleSumTree, sum_leaf_hash, sum_node_hash, verify_sum_multiproof

    unit, total = 4, 14  # leaves cover 4, 4, 4, 2 units
    counts = [1, 0, 2, 1]
    leaves = [(c, sum_leaf_hash(c, b"%d" % i)) for i, c in enumerate(counts)]
    tree = MerkleSumTree(leaves)
    proof = tree.multiproof([0])  # siblings: leaf 1, then node (2, 3)
    assert [c for c, _ in proof] == [0, 3]
    args = {"unit": unit, "total": total}
    assert verify_sum_multiproof(tree.root, 4, {0: leaves[0]}, proof, **args) == 4
    # a sibling claiming a different count with the same hash leads elsewhere
    with pytest.raises(ProtocolError, match="committed root"):
        verify_sum_multiproof(tree.root, 4, {0: leaves[0]}, [proof[0], (4, proof[1][1])], **args)
    # a tree whose right half claims 7 > 6 units (leaves 2 and 3 cover 4 + 2): refused by capacity alone,
    # whatever the root (the server builds that node and the root consistently)
    big = (7, sum_node_hash(7, leaves[2][1], leaves[3][1]))
    left = (1, sum_node_hash(1, leaves[0][1], leaves[1][1]))
    forged_root = sum_node_hash(8, left[1], big[1])
    with pytest.raises(ProtocolError, match="more than the 6 units"):
        verify_sum_multiproof(forged_root, 4, {0: leaves[0]}, [leaves[1], big], **args)
    # a leaf the verifier holds with more than its units, and a count at capacity accepted
    with pytest.raises(ProtocolError, match="more than the 2 units"):
        verify_sum_multiproof(tree.root, 4, {3: (3, leaves[3][1])}, tree.multiproof([3]), **args)
    full = MerkleSumTree([(4, leaves[0][1]), (4, leaves[1][1]), (4, leaves[2][1]), (2, leaves[3][1])])
    assert verify_sum_multiproof(full.root, 4, {1: (4, leaves[1][1])}, full.multiproof([1]), **args) == 14
    with pytest.raises(ProtocolError, match="does not cover"):
        verify_sum_multiproof(tree.root, 3, {0: leaves[0]}, proof, **args)
