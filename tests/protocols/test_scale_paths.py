"""The array fast paths used at scale agree with independent element-by-element oracles written here."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from protocols import messages as m
from protocols.graph import RosterGraph, neighbourhoods, roster_graph
from secagg_dp.crypto.prg import keystream
from secagg_dp.crypto.shamir import PRIME
from secagg_dp.errors import ParameterError, ProtocolError

RID = b"r" * 16


def _brute_neighbours(ids: list[int], k: int, seed: bytes) -> dict[int, set[int]]:
    """Ring by 128-bit keys compared as Python ints; neighbours by ring distance (and the antipode for odd k)."""
    srt = sorted(ids)
    ks = keystream(seed, 16 * len(srt))
    key = {v: (int.from_bytes(ks[16 * i : 16 * i + 8], "little"), int.from_bytes(ks[16 * i + 8 : 16 * i + 16], "little"))
           for i, v in enumerate(srt)}
    ring = sorted(srt, key=lambda v: key[v])
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
    for u, row in zip(ids, rows.tolist()):
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
    for v, row, blob in zip(holders, shares, packed):
        assert blob == m.SharePlaintext(7, v, row[:16].copy(), row[16:].copy()).to_bytes()
    bad = bytearray(packed[2])
    bad[-4:] = PRIME.to_bytes(4, "big")  # not an element of GF(p)
    blobs = [packed[0], packed[1], bytes(bad), packed[3][:-1], packed[4]]
    ok, rows = m.SharePlaintext.unpack_rows(blobs, [7, 7, 7, 7, 6], 4)
    # holder 4 is named only by packed[1]; packed[0] is for holder 2, packed[4] names owner 7, not 6
    assert ok.tolist() == [False, True, False, False, False]
    assert rows[1].tolist() == shares[1].tolist()
    for blob, owner, good in zip(blobs, [7, 7, 7, 7, 6], ok.tolist()):  # the one-message parser agrees
        try:
            pt = m.SharePlaintext.from_bytes(blob)
        except ProtocolError:
            assert not good
        else:
            assert good == (pt.owner == owner and pt.holder == 4)


def test_survivor_list_is_one_checked_array():
    msg = m.decode(m.SurvivorList(RID, m.SERVER, 3, (1, 3, 9)).to_bytes())
    assert msg.survivors.tolist() == [1, 3, 9] and not msg.survivors.flags.writeable
    assert 3 in msg.survivors and 4 not in msg.survivors
    for bad in [(3, 1), (1, 1), (-1, 2), (1, m.MAX_CLIENT_ID + 1), (1.5,), ("a",)]:
        with pytest.raises(ProtocolError, match="survivors"):
            m.SurvivorList(RID, m.SERVER, 3, bad)
