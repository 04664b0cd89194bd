"""The ring layout's keyed permutation: a bijection of [0, n) (exhaustively for small n), inverse of itself
in the other direction, equal to an element-by-element re-implementation written here from the documented
construction, and neighbourhoods whose corrupt count follows the hypergeometric law of a uniform ring."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scipy import stats

from protocols.graph import RosterGraph, index_graph, roster_graph
from secagg_dp.crypto.prp import ROUNDS, FeistelPermutation
from secagg_dp.errors import ParameterError


def _seed(i: int) -> bytes:
    return hashlib.sha256(b"prp test %d" % i).digest()


def _reference(n: int, seed: bytes, x: int) -> int:
    """pi(x) one value at a time with Python ints: FE2 on Z_a x Z_b (Black & Rogaway 2002), AES-256 round
    function F_i(R) = first 8 bytes (little-endian) of AES_K(i || R) mod m_i, cycle walking below n."""
    a = math.isqrt(n - 1) + 1
    b = -(-n // a)
    key = hashlib.sha256(b"secagg-dp/v3/ring-prp\x00" + seed + n.to_bytes(8, "big")).digest()

    def f(i: int, r: int, m: int) -> int:
        enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
        block = enc.update(i.to_bytes(8, "little") + r.to_bytes(8, "little"))
        return int.from_bytes(block[:8], "little") % m

    y = x
    while True:
        left, right = divmod(y, b)
        for i in range(ROUNDS):
            m = a if i % 2 == 0 else b
            left, right = right, (left + f(i, right, m)) % m
        y = left * b + right
        if y < n:
            return y


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 100, 257, 1000])
def test_permutation_of_the_whole_domain_exhaustively(n):
    perm = FeistelPermutation(n, _seed(n))
    y = perm.forward(np.arange(n))
    assert sorted(y.tolist()) == list(range(n))
    assert perm.inverse(y).tolist() == list(range(n))
    assert perm.forward(perm.inverse(np.arange(n))).tolist() == list(range(n))


@pytest.mark.parametrize("n", [2, 10, 99, 1000, 10**6 + 3])
def test_matches_the_element_by_element_reference(n):
    perm = FeistelPermutation(n, _seed(7))
    xs = sorted({0, n - 1, *np.random.default_rng(n).integers(0, n, size=20).tolist()})
    assert perm.forward(xs).tolist() == [_reference(n, _seed(7), x) for x in xs]
    assert perm.inverse(perm.forward(xs)).tolist() == xs


@pytest.mark.parametrize("n", [100, 1000, 10**6 + 3])
def test_few_values_agree_with_the_vectorised_pass(n):
    # A handful of values (a client's look-ups) runs the rounds on Python ints, many run them on numpy arrays:
    # both must give the same permutation, element by element and through cycle walking.
    perm = FeistelPermutation(n, _seed(11))
    xs = np.random.default_rng(n).integers(0, n, size=300)
    for name in ("forward", "inverse"):
        many = getattr(perm, name)(xs)
        few = np.concatenate([getattr(perm, name)(xs[i : i + 30]) for i in range(0, xs.size, 30)])
        ones = np.concatenate([getattr(perm, name)(xs[i : i + 1]) for i in range(20)])
        assert few.tolist() == many.tolist()
        assert ones.tolist() == many[:20].tolist()


def test_depends_on_seed_and_size_and_checks_its_arguments():
    base = FeistelPermutation(1000, _seed(1)).forward(np.arange(1000))
    assert not np.array_equal(base, FeistelPermutation(1000, _seed(2)).forward(np.arange(1000)))
    assert not np.array_equal(base[:999], FeistelPermutation(999, _seed(1)).forward(np.arange(999)))
    with pytest.raises(ParameterError, match="values"):
        FeistelPermutation(10, _seed(1)).forward([10])
    with pytest.raises(ParameterError, match="values"):
        FeistelPermutation(10, _seed(1)).inverse([-1])
    with pytest.raises(ParameterError, match="seed"):
        FeistelPermutation(10, b"short")
    with pytest.raises(ParameterError, match="rounds"):
        FeistelPermutation(10, _seed(1), rounds=5)


@pytest.mark.parametrize("n,k", [(50, 6), (51, 7), (300, 32), (5000, 32), (5001, 33)])
def test_graphs_agree_between_a_client_the_server_and_the_whole_ring(n, k):
    """A client's O(k) lookups (pi per rank, before any whole-ring array exists), the server's whole-ring
    arrays on the ids, and the symmetric neighbour relation all describe one graph."""
    rng = np.random.default_rng(n + k)
    ids = sorted(rng.choice(10**7, size=n, replace=False).tolist())
    seed = _seed(n * k)
    server = roster_graph(tuple(ids), k, seed)
    rows = server.rows(ids)  # whole-ring arrays
    for rank in rng.choice(n, size=5, replace=False).tolist():
        client = RosterGraph(None, k, seed, n=n)  # fresh: nothing built
        own = client.rows([rank])[0]
        assert client._ring_pos is None or n <= 8 * (k + 1)  # a client's lookups do not build the ring
        assert sorted(np.asarray(ids)[own].tolist()) == sorted(rows[rank].tolist())
    sets = server.neighbour_sets()
    assert all(u in sets[v] for u, nb in sets.items() for v in nb)  # symmetric
    assert all(u not in nb for u, nb in sets.items())
    assert np.array_equal(index_graph(n, k, seed).ring_pos, server.ring_pos)


@pytest.mark.slow
def test_corrupt_neighbours_follow_the_hypergeometric_law():
    """Over 3000 seeds, the number of members of a fixed set C (the 20 smallest ids: structured, as a server
    would pick) among the k = 16 neighbours of a fixed victim follows Hypergeom(N - 1, |C|, k), the law of a
    uniform ring (scipy's pmf is the oracle). Chi-square on the classes 0..4 and >= 5; critical value at
    false-failure rate 1e-6."""
    n, k, c, victim, runs = 200, 16, 20, 100, 3000
    counts = np.zeros(6, dtype=np.int64)
    for s in range(runs):
        graph = RosterGraph(None, k, _seed(10_000 + s), n=n)
        row = graph.rows([victim])[0]
        counts[min(int((row < c).sum()), 5)] += 1
    law = stats.hypergeom(n - 1, c, k)
    p = np.array([law.pmf(j) for j in range(5)] + [law.sf(4)])
    chi2 = float((((counts - runs * p) ** 2) / (runs * p)).sum())
    assert chi2 < stats.chi2.isf(1e-6, df=5), (counts.tolist(), (runs * p).round(1).tolist())


def test_pickles_after_use_and_the_copy_gives_the_same_values():
    import pickle

    perm = FeistelPermutation(10**6 + 3, _seed(5))
    xs = np.random.default_rng(5).integers(0, perm.n, size=40)
    before = perm.forward(xs)  # makes and keeps the cipher context, which does not pickle
    copy = pickle.loads(pickle.dumps(perm))
    assert copy.forward(xs).tolist() == before.tolist() == [_reference(perm.n, _seed(5), int(x)) for x in xs]
    assert copy.inverse(before).tolist() == xs.tolist()
