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
