"""A client caps the size of every message it parses, before parsing: caps from the round's parameters and
its own policy (expected population ``max_clients``, degree k). Refusals name the kind, the size and the cap."""

from __future__ import annotations

import dataclasses
import re
import struct
import tracemalloc

import numpy as np
import pytest
from roundkit import deliver_all, make_round

from protocols import messages as m
from protocols.security import ClientPolicy
from protocols.stages import ClientStage
from secagg_dp.errors import ParameterError, ProtocolError

IDS = tuple(range(1, 9))
V = 3


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    except ProtocolError:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def _cap_of(err: pytest.ExceptionInfo) -> tuple[int, int]:
    size, cap = re.search(r"of (\d+) bytes exceeds the cap (\d+)", str(err.value)).groups()
    return int(size), int(cap)


def _with_roster_row(roster: m.KeyRoster, extra: int) -> bytes:
    """The roster with ``extra`` more (well-formed, unsigned) rows: a larger population than the client's."""
    ids = roster.ids + tuple(range(1000, 1000 + extra))
    indices = roster.indices + tuple(range(roster.size, roster.size + extra))
    pad = lambda a, w: np.vstack([a, np.full((extra, w), 9, np.uint8)])  # noqa: E731
    return m.KeyRoster(
        roster.round_id,
        m.SERVER,
        m.BROADCAST,
        roster.size + extra,
        roster.root,
        indices,
        ids,
        pad(roster.enc_pks, 32),
        pad(roster.mask_pks, 32),
        pad(roster.signatures, 64),
    ).to_bytes()


@pytest.mark.parametrize("security", ["active", "semi-honest"])
def test_roster_larger_than_the_clients_expected_population_is_refused_before_parsing(security):
    server, clients, _, _ = make_round(5, 6, IDS, security=security)
    for c in clients.values():  # every client expects at most 8 clients
        object.__setattr__(c, "policy", dataclasses.replace(c.policy, max_clients=len(IDS)))
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    ((_, roster_bytes),) = server.advance()
    roster = m.decode(roster_bytes)
    one_more = _with_roster_row(roster, 1)
    with pytest.raises(ProtocolError, match="KEY_ROSTER message of") as err:
        clients[V].receive(one_more)
    size, cap = _cap_of(err)
    assert size == len(one_more) and cap == len(roster_bytes)  # the cap is exactly an 8-client roster
    assert clients[V].stage is ClientStage.KEYS_ADVERTISED
    huge = _with_roster_row(roster, 20_000)  # 2.6 MB: refused without allocating anything like its size
    assert _peak_bytes(lambda: clients[V].receive(huge)) < len(huge) // 64
    assert clients[V].receive(roster_bytes) is not None  # the real roster still goes through


def test_default_population_cap_and_full_graph_cap():
    big = ClientPolicy()
    assert big.max_clients == 1 << 20
    with pytest.raises(ParameterError, match="max_clients"):
        ClientPolicy(max_clients=1)
    server, clients, _, _ = make_round(5, 6, IDS)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    # full graph: at most shamir.MAX_HOLDERS = 65536 entries whatever max_clients says; the wire layout is a
    # 28-byte header, root (32), size, row count and proof length (4 each), then per row its leaf index (4), id
    # (4), two X25519 keys (32 each) and an Ed25519 signature (64), and no proof
    assert clients[V]._size_cap(m.Kind.KEY_ROSTER) == 28 + 32 + 3 * 4 + 65536 * (4 + 4 + 32 + 32 + 64)


def test_round_open_is_capped_at_its_fixed_size():
    server, clients, _, _ = make_round(5, 6, IDS)
    data = server.open_round()
    with pytest.raises(ProtocolError, match=f"ROUND_OPEN message of {len(data) + 1} bytes exceeds the cap {len(data)}"):
        clients[V].receive(data + b"\0")
    assert clients[V].stage is ClientStage.IDLE


def test_survivor_list_and_unmask_request_capped_by_the_roster():
    server, clients, _, _ = make_round(5, 6, IDS)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    deliver_all(server, clients, server.advance())
    lists = dict(server.advance())
    with pytest.raises(ProtocolError, match="SURVIVOR_LIST message of") as err:
        clients[V].receive(lists[V] + bytes(4))
    assert _cap_of(err)[1] == len(lists[V])  # every roster member survived: the largest list is this one
    deliver_all(server, clients, lists.items())
    req = dict(server.advance())[V]
    with pytest.raises(ProtocolError, match="UNMASK_REQUEST message of") as err:
        clients[V].receive(req + bytes(1 << 16))
    assert clients[V].stage is ClientStage.SURVIVORS_SIGNED
    assert clients[V].receive(req) is not None


# -- refusals a roster's size decides come before its entries are decoded ----------------------------------------
def _roster_bytes(rid: bytes, size: int, rows: int, recipient: int = m.BROADCAST) -> bytes:
    """A roster message laid out as KeyRoster.to_bytes (header, root, size, row count, rows of index, id, two
    keys and a signature, proof length) with zero rows: its entries would fail to verify, but a client must
    refuse it on its size fields before it looks at them."""
    head = struct.pack(">2sBB16sII", m.MAGIC, m.VERSION, int(m.Kind.KEY_ROSTER), rid, m.SERVER, recipient)
    return head + bytes(32) + struct.pack(">II", size, rows) + bytes(rows * (4 + 4 + 32 + 32 + 64)) + bytes(4)


@pytest.fixture
def no_decoding(monkeypatch):
    """Counts every call of the message decoder (a refusal before parsing leaves it at 0)."""
    calls = []
    real = m.decode
    monkeypatch.setattr(m, "decode", lambda data: calls.append(len(data)) or real(data))
    return calls


@pytest.mark.parametrize(
    ("policy", "neighbours", "size", "rows", "why"),
    [
        # the finding: 65,505 entries (9.2 MB), parsed for 6.5 s before the threshold rule refused it;
        # t = 6 < floor(2 * 65505 / 3) + 1 = 43671 decides it from the size field alone
        ({}, None, 65_505, 65_505, "threshold 6 is unsafe .* \\(need >= 43671\\)"),
        ({"min_roster": 8}, None, 7, 7, "fewer than our minimum roster 8"),
        ({}, None, 5, 5, "roster has 5 < threshold 6"),
        ({"max_clients": 8}, None, 9, 8, "exceeds the population we expect"),  # 8 rows: within the byte cap
        ({}, None, 8, 7, "exactly the entries of our share holders"),  # a broadcast must carry every entry
        ({}, 4, 65_505, 6, "exactly the entries of our share holders"),  # k = 4: 5 holders, not more, not less
        ({}, 4, 65_505, 4, "exactly the entries of our share holders"),
        ({}, 4, 5, 5, "neighbours \\+ 2 = 6"),  # 5 <= k + 1 would be a full graph
    ],
)
def test_size_decided_roster_refusals_happen_before_decoding(no_decoding, policy, neighbours, size, rows, why):
    t = 6 if neighbours is None else 3
    server, clients, _, _ = make_round(5, t, IDS, neighbours=neighbours)
    for c in clients.values():
        object.__setattr__(c, "policy", dataclasses.replace(c.policy, **policy))
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    data = _roster_bytes(server.round_id, size, rows, m.BROADCAST if neighbours is None else V)
    no_decoding.clear()
    with pytest.raises(ProtocolError, match=why):
        clients[V].receive(data)
    assert no_decoding == [] and clients[V].stage is ClientStage.KEYS_ADVERTISED
    real = server.advance()  # the real roster is still taken (and decoded)
    assert clients[V].receive(dict(real)[m.BROADCAST if neighbours is None else V]) is not None
    assert no_decoding


def test_unmask_request_cap_is_the_two_hop_neighbourhood_not_the_roster():
    """SecAgg+ (k = 4, even): the signatures a client accepts come from the survivors at its two-hop ring
    positions, at most 2k + 1 = 9 of them whatever n, so the cap is 28 (header) + 16 (three counts, noise
    group) + 4 (k + 1) (the clients that shared keys with it) + 68 (2k + 1) (signer id and signature) = 676
    bytes; before, 68 bytes per roster member (64.9 MiB at n = 10^6)."""
    for ids in (tuple(range(1, 13)), tuple(range(1, 31))):
        server, clients, _, _ = make_round(5, 3, ids, neighbours=4)
        deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
        for _ in range(3):
            deliver_all(server, clients, server.advance())
        req = dict(server.advance())[V]
        assert clients[V]._size_cap(m.Kind.UNMASK_REQUEST) == 28 + 16 + 4 * 5 + 68 * 9
        honest = m.decode(req)
        extra = tuple(v for v in ids if v not in honest.signers)[: 10 - len(honest.signers)]
        signers = tuple(sorted(honest.signers + extra))
        padded = m.UnmaskRequest(
            honest.round_id,
            m.SERVER,
            V,
            honest.survivors,
            honest.dropped,
            signers,
            np.zeros((len(signers), m.SIG_LEN), np.uint8),
            honest.noise_group,
        ).to_bytes()
        with pytest.raises(ProtocolError, match="UNMASK_REQUEST message of .* exceeds the cap 676"):
            clients[V].receive(padded)  # 10 signers > 2k + 1: refused by its size
        assert clients[V].receive(req) is not None


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8, 31, 32, 33])
@pytest.mark.parametrize("n", [40, 41, 1000, 1001])
def test_two_hop_window_bound_of_the_unmask_request_cap(k, n):
    # The bound stated in docs/secure-aggregation.md: offsets A = {-(k - 1)/2 .. (k - 1)/2} (and +-c, the chord
    # c = floor(n/2), for odd k); the two-hop window is {a + b mod n : a, b in A (and the chords)}, enumerated
    # here by brute force over pairs, against 2k + 1 (even k) and 3k (odd k; 3k - 1 for even n).
    from protocols.graph import index_graph, two_hop_positions

    half = k // 2
    one = {0, *range(1, half + 1), *(-j for j in range(1, half + 1))}
    if k % 2:
        one |= {n // 2, -(n // 2)}
    brute = {(a + b) % n for a in one for b in one}
    want = 2 * k + 1 if k % 2 == 0 else 3 * k - (n % 2 == 0)
    assert len(brute) == min(n, want)
    assert two_hop_positions(index_graph(n, k, b"\x01" * 32), 0).size == len(brute)
