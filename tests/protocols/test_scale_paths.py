"""The array fast paths used at scale agree with independent element-by-element oracles written here."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from protocols import messages as m
from protocols.graph import RosterGraph, neighbourhoods, roster_graph
from secagg_dp.crypto.prp import FeistelPermutation
from secagg_dp.crypto.shamir import PRIME
from secagg_dp.errors import ParameterError, ProtocolError

RID = b"r" * 16


def _brute_neighbours(ids: list[int], k: int, seed: bytes) -> dict[int, set[int]]:
    """Ring from the permutation evaluated one rank at a time (pi(i) = position of the i-th smallest id);
    neighbours by ring distance (and the antipode for odd k), as Python sets."""
    srt = sorted(ids)
    perm = FeistelPermutation(len(srt), seed)
    pos = {v: int(perm.forward([i])[0]) for i, v in enumerate(srt)}
    ring = sorted(srt, key=pos.__getitem__)
    n = len(ring)
    out = {}
    for i, u in enumerate(ring):
        near = {ring[(i + d) % n] for d in range(-(k // 2), k // 2 + 1)}
        if k % 2:
            near |= {ring[(i + n // 2) % n], ring[(i - n // 2) % n]}
        out[u] = near - {u}
    return out


@pytest.mark.parametrize("n,k", [(9, 2), (10, 3), (11, 3), (12, 5), (13, 6), (40, 7), (41, 8), (200, 31)])
def test_roster_graph_rows_match_brute_force_ring(n, k):
    rng = np.random.default_rng(n * 100 + k)
    ids = sorted(rng.choice(10**6, size=n, replace=False).tolist())
    seed = os.urandom(32)
    expect = _brute_neighbours(ids, k, seed)
    graph = RosterGraph(ids, k, seed)
    rows = graph.rows(ids)
    for u, row in zip(ids, rows.tolist(), strict=True):
        assert len(row) == len(set(row)) and set(row) == expect[u]  # no repeats, even where the chord meets itself
    assert neighbourhoods(ids, k, seed) == expect
    with pytest.raises(ParameterError, match="clients"):
        graph.rows([max(ids) + 1])


def test_roster_graph_cache_tells_rosters_apart():
    seed = os.urandom(32)
    a = roster_graph(tuple(range(20)), 4, seed)
    assert roster_graph(tuple(range(20)), 4, seed) is a
    assert roster_graph(list(range(20)), 4, seed) is a  # equal ids, another container
    assert roster_graph(tuple(range(1, 21)), 4, seed) is not a
    assert roster_graph(tuple(range(20)), 6, seed) is not a
    assert roster_graph(tuple(range(20)), 4, os.urandom(32)) is not a


def _parse_boxes(body: bytes) -> tuple[tuple[int, ...], tuple[bytes, ...]]:
    """Reference parser of the count-prefixed (id, length, box) list, one entry at a time."""
    (n,), pos, ids, boxes = struct.unpack_from(">I", body), 4, [], []
    for _ in range(n):
        i, ln = struct.unpack_from(">II", body, pos)
        ids.append(i)
        boxes.append(body[pos + 8 : pos + 8 + ln])
        pos += 8 + ln
    assert pos == len(body)
    return tuple(ids), tuple(boxes)


@pytest.mark.parametrize("lengths", [[60] * 7, [60, 60, 61], [0, 0], [5], [60] * 3 + [59]])
def test_share_bundle_boxes_parse_like_the_reference(lengths):
    senders = tuple(range(3, 3 + len(lengths)))
    boxes = tuple(os.urandom(ln) for ln in lengths)
    data = m.ShareBundle(RID, m.SERVER, 9, senders, boxes).to_bytes()
    msg = m.decode(data)
    assert (msg.senders, msg.boxes) == _parse_boxes(data[m.HEADER_LEN :]) == (senders, boxes)
    with pytest.raises(ProtocolError):
        m.decode(data[:-1])  # truncated
    with pytest.raises(ProtocolError):
        m.decode(data + b"\x00")  # trailing byte


def test_share_plaintext_rows_equal_one_message_each():
    rng = np.random.default_rng(3)
    shares = rng.integers(0, PRIME, size=(5, 32), dtype=np.uint32)
    holders = [2, 4, 8, 16, 32]
    packed = m.SharePlaintext.pack_rows(7, holders, shares)
    for v, row, blob in zip(holders, shares, packed, strict=True):
        assert blob == m.SharePlaintext(7, v, row[:16].copy(), row[16:].copy()).to_bytes()
    bad = bytearray(packed[2])
    bad[-4:] = PRIME.to_bytes(4, "big")  # not an element of GF(p)
    blobs = [packed[0], packed[1], bytes(bad), packed[3][:-1], packed[4]]
    ok, rows = m.SharePlaintext.unpack_rows(blobs, [7, 7, 7, 7, 6], 4)
    # holder 4 is named only by packed[1]; packed[0] is for holder 2, packed[4] names owner 7, not 6
    assert ok.tolist() == [False, True, False, False, False]
    assert rows[1].tolist() == shares[1].tolist()
    for blob, owner, good in zip(blobs, [7, 7, 7, 7, 6], ok.tolist(), strict=True):  # the one-message parser agrees
        try:
            pt = m.SharePlaintext.from_bytes(blob)
        except ProtocolError:
            assert not good
        else:
            assert good == (pt.owner == owner and pt.holder == 4)


def test_survivor_list_round_trips_and_refuses_malformed_fields():
    chunks = np.arange(64, dtype=np.uint8).reshape(2, 32)
    sent = m.SurvivorList(RID, m.SERVER, 3, 5, b"r" * 32, (0, 4), chunks, None, (1, 3, 9))
    msg = m.decode(sent.to_bytes())
    assert (msg.count, msg.root, msg.chunk_indices) == (5, b"r" * 32, (0, 4))
    assert msg.chunks.tolist() == chunks.tolist() and msg.proof.shape == (0, 32)
    assert msg.near_ids.tolist() == [1, 3, 9] and not msg.near_ids.flags.writeable
    for bad in [(3, 1), (1, 1), (-1, 2), (1, m.MAX_CLIENT_ID + 1), (1.5,), ("a",)]:
        with pytest.raises(ProtocolError, match="near_ids"):
            m.SurvivorList(RID, m.SERVER, 3, 5, b"r" * 32, (0, 4), chunks, None, bad)
    with pytest.raises(ProtocolError, match="chunk_indices"):
        m.SurvivorList(RID, m.SERVER, 3, 5, b"r" * 32, (4, 0), chunks)
    with pytest.raises(ProtocolError):
        m.decode(sent.to_bytes()[:-1])


@pytest.mark.parametrize("n", [1, 7, 256, 300])
def test_survivor_bitmap_matches_its_definition(n):
    # Position p is bit 7 - p % 8 of byte p // 8, 32 bytes per leaf, zero padding: built here with Python ints.
    alive = np.random.default_rng(n).random(n) < 0.5
    want = bytearray(-(-n // 256) * 32)
    for p in range(n):
        if alive[p]:
            want[p // 8] |= 1 << (7 - p % 8)
    assert m.survivor_chunks(alive).tobytes() == bytes(want)


def _oracle(inputs, survivors, bits):
    return [sum(int(inputs[c][j]) for c in survivors) % (1 << bits) for j in range(len(inputs[0]))]


# full graph (t > 2n/3: 4-8 s per case, CI only), SecAgg+ even and odd k; odd k in semi-honest mode CI only
@pytest.mark.parametrize(
    "security,k,t",
    [
        pytest.param("active", None, 81, marks=pytest.mark.slow),
        pytest.param("semi-honest", None, 81, marks=pytest.mark.slow),
        ("active", 12, 8),
        ("semi-honest", 12, 8),
        ("active", 13, 8),
        pytest.param("semi-honest", 13, 8, marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize("stage", ["share_keys", "masked_input", "consistency", "unmasking"])
def test_round_sum_equals_brute_force_after_dropouts(security, k, t, stage):
    from protocols import run_secagg_round

    n, bits = 120, 20
    rng = np.random.default_rng(7)
    inputs = {i: rng.integers(0, 1 << bits, size=6, dtype=np.uint64) for i in range(n)}
    gone = set(range(3, n, 17))  # 7 clients, spread around the ring
    res = run_secagg_round(
        inputs,
        bits=bits,
        threshold=t,
        neighbours=k,
        security=security,
        dropouts={stage: gone},
        seed=11,
        round_id=bytes(16),
    )  # pinned: one fixed graph
    counted = set(range(n)) - (gone if stage in ("share_keys", "masked_input") else set())
    assert res.survivors == frozenset(counted)
    assert res.aggregate.tolist() == _oracle(inputs, counted, bits)


@pytest.mark.parametrize("k,t", [(10, 8), (11, 8)])
def test_unmask_requests_cover_every_owner_with_t_signers(k, t):
    """Server side of the consistency round at a size where the signer sweep wraps around the ring: every
    request gives each owner t signers among its holders (the brute-force ring above), and only signers
    the client can check (survivors among the holders of its owners); the client then accepts it."""
    from roundkit import deliver_all, make_round

    ids = tuple(range(1, 61))
    server, clients, _, _ = make_round(t=t, ids=ids, neighbours=k)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    roster_out = server.advance()
    roster = m.decode(roster_out[0][1])
    deliver_all(server, clients, roster_out)  # -> ShareKeys
    late = set(ids[::20])  # these never send a masked input
    bundles = [(r, b) for r, b in server.advance() if r not in late]
    deliver_all(server, {c: v for c, v in clients.items() if c not in late}, bundles)
    deliver_all(server, clients, server.advance())  # survivor lists -> signatures
    nb = _brute_neighbours(list(ids), k, roster.graph_seed)
    holders = {u: nb[u] | {u} for u in ids}
    survivors = set(ids) - late
    assert all(len(holders[v] & survivors) >= t for v in ids)  # so every request can and must cover all owners
    requests = server.advance()
    assert {u for u, _ in requests} == survivors
    for u, b in requests:
        req = m.decode(b)
        owners = set(req.survivors) | set(req.dropped)
        assert owners == holders[u]
        assert set(req.signers) <= set().union(*(holders[v] for v in owners)) & survivors
        for v in owners:
            assert len(set(req.signers) & holders[v]) >= t
        assert m.decode(clients[u].receive(b)).KIND is m.Kind.UNMASK_RESPONSE  # and the client agrees
