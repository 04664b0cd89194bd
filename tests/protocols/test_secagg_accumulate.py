"""The server's running sum of masked inputs: bit-exact against a Python-int oracle, a duplicate is never
added twice, a refused message leaves the sum unchanged, and a masked input arriving after its sender was
declared dropped is refused."""

import numpy as np
import pytest
from roundkit import BITS, DIM, deliver_all, exact_sum, make_round

from protocols import messages as m
from protocols import run_secagg_round
from protocols.round import drive_round
from protocols.stages import ServerStage
from protocols.transport import Envelope, FaultInjector, InProcessTransport
from secagg_dp.crypto import signing
from secagg_dp.crypto.prg import word_dtype
from secagg_dp.errors import ProtocolError

IDS = tuple(range(1, 11))


def _inputs(n, dim, bits, seed):
    rng = np.random.default_rng(seed)
    return {c: rng.integers(0, 1 << bits, size=dim, dtype=np.uint64) for c in range(3, 3 + n)}


# Dropouts at every stage: a client silent from "advertise_keys" / "share_keys" never enters U2; one silent
# from "masked_input" is dropped (its pairwise masks are removed); one silent from "consistency" or
# "unmasking" sent its masked input, so its input is in the sum.
@pytest.mark.parametrize(
    "n,t,k,security,bits",
    [
        (20, 14, None, "active", 32),
        (20, 8, 12, "active", 62),
        (20, 9, 12, "semi-honest", 7),
        (20, 14, None, "active", 1),
    ],
)
def test_accumulated_sum_equals_python_int_sum_with_dropouts_at_every_stage(n, t, k, security, bits):
    inputs = _inputs(n, 23, bits, seed=n + bits)
    ids = sorted(inputs)
    stages = ["advertise_keys", "share_keys", "masked_input", "unmasking"]
    if security == "active":
        stages.insert(3, "consistency")
    dropouts = {s: {ids[2 * i]} for i, s in enumerate(stages)}
    res = run_secagg_round(inputs, bits=bits, threshold=t, neighbours=k, security=security, dropouts=dropouts, seed=7)
    gone_before_masking = {ids[0], ids[2], ids[4]}
    assert res.survivors == frozenset(inputs) - gone_before_masking
    assert res.dropped == frozenset({ids[4]})
    oracle = [sum(int(inputs[c][j]) for c in res.survivors) % (1 << bits) for j in range(23)]  # Python ints
    assert res.aggregate.dtype == np.uint64 and res.aggregate.tolist() == oracle


def _to_masked_stage(security="active", neighbours=None, t=7):
    """Seeded round of IDS advanced to COLLECT_MASKED; returns the server, clients, inputs and each client's
    MaskedInput bytes (not yet delivered)."""
    server, clients, inputs, _ = make_round(3, t, IDS, neighbours=neighbours, security=security)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    masked = {r: clients[r].receive(b) for r, b in server.advance()}
    assert server.stage is ServerStage.COLLECT_MASKED
    return server, clients, inputs, masked


def _finish(server, clients):
    while server.stage not in (ServerStage.DONE, ServerStage.ABORTED):
        out = server.advance()
        if out:
            deliver_all(server, clients, out)
    return server.outcome


def _snapshot(server):
    return (None if server._acc is None else server._acc.copy()), set(server._masked)


def _unchanged(server, snap):
    acc, ids = snap
    return set(server._masked) == ids and (
        server._acc is None if acc is None else np.array_equal(server._acc, acc) and server._acc.dtype == acc.dtype
    )


@pytest.mark.parametrize("security,neighbours", [("active", None), ("semi-honest", None), ("active", 8)])
def test_duplicate_masked_input_is_refused_and_not_added_twice(security, neighbours):
    server, clients, inputs, masked = _to_masked_stage(security, neighbours)
    for cid in IDS[:4]:
        server.receive(masked[cid], sender=cid)
    snap = _snapshot(server)
    with pytest.raises(ProtocolError, match="duplicate MaskedInput from client 2"):
        server.receive(masked[2], sender=2)  # exact replay of an accepted message
    assert _unchanged(server, snap)
    for cid in IDS[4:]:
        server.receive(masked[cid], sender=cid)
    with pytest.raises(ProtocolError, match="duplicate"):
        server.receive(masked[IDS[-1]], sender=IDS[-1])
    out = _finish(server, clients)
    assert out.survivors == frozenset(IDS) and out.aggregate.tolist() == exact_sum(inputs, IDS)


def test_refused_masked_inputs_leave_the_sum_unchanged():
    server, clients, inputs, masked = _to_masked_stage()
    server.receive(masked[1], sender=1)
    snap = _snapshot(server)
    assert server._acc.dtype == word_dtype(BITS) == np.uint32  # packed to the bit width, not 8 bytes/coordinate
    rid = server.round_id
    bad = [
        # (bytes, channel sender, expected message)
        (masked[2], 3, "forgery"),  # client 2's input on client 3's channel
        (m.MaskedInput(bytes(16), 2, m.SERVER, BITS, np.ones(DIM, np.uint64)).to_bytes(), 2, "another round"),
        (m.MaskedInput(rid, 2, m.SERVER, BITS, np.ones(DIM - 1, np.uint64)).to_bytes(), 2, "wrong shape"),
        (m.MaskedInput(rid, 2, m.SERVER, BITS + 1, np.ones(DIM, np.uint64)).to_bytes(), 2, "more than the cap"),
        (m.MaskedInput(rid, 2, m.SERVER, BITS - 1, np.ones(DIM, np.uint64)).to_bytes(), 2, "modulus"),
        (m.MaskedInput(rid, 2, m.SERVER, BITS, np.ones(DIM, np.uint64)).to_bytes()[:-1], 2, ""),  # truncated
        (masked[2] + b"\0", 2, "more than the cap"),  # a residue's worth of bytes too many
        (masked[2], 99, "unknown or excluded"),
    ]
    for data, sender, msg in bad:
        with pytest.raises(ProtocolError, match=msg or None):
            server.receive(data, sender=sender)
        assert _unchanged(server, snap), msg
    for cid in IDS[1:]:
        server.receive(masked[cid], sender=cid)
    out = _finish(server, clients)
    assert out.aggregate.tolist() == exact_sum(inputs, IDS)


@pytest.mark.parametrize("security,neighbours", [("active", None), ("semi-honest", None), ("active", 8)])
def test_masked_input_arriving_after_its_sender_was_declared_dropped_is_refused(security, neighbours):
    server, clients, inputs, masked = _to_masked_stage(security, neighbours)
    late = 4
    for cid in IDS:
        if cid != late:
            server.receive(masked[cid], sender=cid)
    out = server.advance()  # deadline: U3 is fixed without client 4 (survivor lists / unmask requests)
    assert late not in {u for u, _ in out}
    for msg in (m.decode(b) for _, b in out):  # active: |U3| in the commitment; semi-honest: the survivors named
        assert msg.count == len(IDS) - 1 if msg.KIND is m.Kind.SURVIVOR_LIST else late not in msg.survivors
    snap = _snapshot(server)
    with pytest.raises(ProtocolError, match="refuses a MASKED_INPUT"):
        server.receive(masked[late], sender=late)
    assert _unchanged(server, snap)
    deliver_all(server, {c: clients[c] for c in IDS if c != late}, out)
    res = _finish(server, clients)
    survivors = [c for c in IDS if c != late]
    assert res.survivors == frozenset(survivors) and res.dropped == frozenset({late})
    assert res.aggregate.tolist() == exact_sum(inputs, survivors)


def test_server_drops_per_client_vectors_and_boxes():
    server, clients, inputs, masked = _to_masked_stage()
    for cid in IDS:
        server.receive(masked[cid], sender=cid)
    assert server._shares == {} and set(server._commitments) == set(IDS)  # boxes forwarded, then dropped
    assert server._acc.nbytes == 4 * DIM  # one packed vector, whatever the number of clients
    _finish(server, clients)
    assert server._acc is None and server._responses == {}


def test_roster_bytes_decode_to_one_shared_read_only_message():
    server, clients, _, _ = make_round(3, 7, IDS)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    [(_, roster)] = server.advance()
    a, b = m.decode(roster), m.decode(bytes(bytearray(roster)))  # equal bytes, another object
    assert a is b and not a.enc_pks.flags.writeable and not a.signatures.flags.writeable
    for _ in range(2):  # a malformed roster is refused every time (failures are not remembered)
        with pytest.raises(ProtocolError):
            m.decode(roster[:-1])


def test_secaggplus_client_refuses_a_valid_signature_from_a_survivor_holding_none_of_its_secrets():
    ids = tuple(range(1, 21))
    server, clients, _, identities = make_round(3, 4, ids, neighbours=4)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    for _ in range(3):  # roster, bundles, survivor lists
        deliver_all(server, clients, server.advance())
    requests = dict(server.advance())
    u = 1
    req = m.decode(requests[u])
    far = sorted(set(ids) - set(server._holders[u]).union(*(server._holders[v] for v in server._holders[u])))
    assert far  # on a ring of 20 with k = 4, most clients hold no share of any secret client 1 holds
    w = far[0]
    sig = identities[w].sign(signing.LABEL_SURVIVOR_SET, server._statement)  # a valid signature on the set
    signers = tuple(sorted(req.signers + (w,)))
    rows = {v: s.tobytes() for v, s in zip(req.signers, req.signatures, strict=True)} | {w: sig}
    forged = m.UnmaskRequest(
        req.round_id,
        m.SERVER,
        u,
        req.survivors,
        req.dropped,
        signers,
        np.frombuffer(b"".join(rows[v] for v in signers), np.uint8).reshape(-1, m.SIG_LEN).copy(),
    )
    with pytest.raises(ProtocolError, match="holds no share"):
        clients[u].receive(forged.to_bytes())
    assert clients[u].receive(requests[u]) is not None  # the server's own request is still answered


@pytest.mark.parametrize("security,neighbours", [("active", None), ("semi-honest", 8)])
def test_delayed_and_replayed_masked_inputs_through_the_transport_leave_the_sum_exact(security, neighbours):
    # Client 6's masked input is held back a stage: it arrives after the server closed U3 (and, in active
    # mode, sent the survivor lists without 6). Client 3's is recorded and injected a second time.
    server, clients, inputs, _ = make_round(4, 7, IDS, neighbours=neighbours, security=security)
    first = InProcessTransport(
        rng=np.random.default_rng(1), faults=FaultInjector().delay(m.Kind.MASKED_INPUT, sender=6)
    )
    recorded = {}
    real_receive = clients[3].receive

    def record(data):
        out = real_receive(data)
        if out is not None and m.peek_kind(out) is m.Kind.MASKED_INPUT:
            recorded["y3"] = out
            first.faults.inject("masked_input:up", Envelope(3, m.SERVER, out))  # replay on 3's own channel
        return out

    clients[3].receive = record
    res = drive_round(server, clients, first)
    assert "y3" in recorded
    assert any("duplicate MaskedInput from client 3" in r for r in res.reports)
    assert any("refuses a MASKED_INPUT" in r for r in res.reports)  # 6's late input
    survivors = [c for c in IDS if c != 6]
    assert res.survivors == frozenset(survivors) and res.dropped == frozenset({6})
    assert res.aggregate.tolist() == exact_sum(inputs, survivors)
