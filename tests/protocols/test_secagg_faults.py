"""Faults and attacks, each with its own test: tampering, replay, wrong recipient, duplicate/unknown senders,
contradictory or repeated unmask requests, malformed bytes, delays, check-in coins."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roundkit import BITS, DIM, deliver_all, make_round
from scipy import stats

from protocols import messages as m
from protocols.client import SecAggClient
from protocols.round import drive_round
from protocols.security import ClientPolicy
from protocols.server import SecAggServer
from protocols.stages import ClientStage
from protocols.transport import FaultInjector, InProcessTransport
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import AbortError, ProtocolError

IDS = tuple(range(1, 8))
T = 5  # active mode, full graph: t > 2n/3 for n = 7
SEMI = ClientPolicy(security="semi-honest")


def setup(seed=1, t=T, ids=IDS, neighbours=None, security="active"):
    server, clients, inputs, _ = make_round(seed, t, ids, neighbours=neighbours, security=security)
    return server, clients, inputs


def run(faults=None, seed=1, t=T, silent=None, neighbours=None, security="active"):
    server, clients, inputs = setup(seed, t, neighbours=neighbours, security=security)
    transport = InProcessTransport(rng=np.random.default_rng(seed), faults=faults)
    res = drive_round(server, clients, transport, silent_from=silent)
    expect = [sum(int(inputs[c][j]) for c in res.survivors) % (1 << BITS) for j in range(DIM)]
    assert res.aggregate.tolist() == expect  # exact, whatever happened
    return res, transport, server, clients


def test_tampered_share_box_rejected_reported_round_continues():
    # Flip a byte inside the first box of client 4's bundle (after header + count + sender + length).
    faults = FaultInjector().tamper(m.Kind.SHARE_BUNDLE, recipient=4, offset=28 + 4 + 8 + 20)
    res, *_ = run(faults)
    assert res.survivors == frozenset(IDS)
    assert any("client 4 rejected the share box" in r for r in res.reports)


def test_tampered_box_of_dropped_client_still_recovers():
    faults = FaultInjector().tamper(m.Kind.SHARE_BUNDLE, recipient=4, offset=28 + 4 + 8 + 20)
    res, *_ = run(faults, silent={1: "masked_input"})
    assert 1 in res.dropped and any("rejected the share box" in r for r in res.reports)


def test_tampered_unmask_share_detected_and_repaired():
    # Corrupt the first self-mask share element in client 1's response: verification fails, the server
    # drops that share and reconstructs from others (7 responders > t = 5).
    def corrupt(b: bytes) -> bytes:
        msg = m.decode(b)
        shares = msg.self_shares.copy()
        shares[0, 0] = (int(shares[0, 0]) + 1) % 65537
        return m.UnmaskResponse(
            msg.round_id, msg.sender, msg.recipient, msg.self_owners, shares, msg.key_owners, msg.key_shares, msg.failed
        ).to_bytes()

    res, _, server, _ = run(FaultInjector().tamper(m.Kind.UNMASK_RESPONSE, sender=1, fn=corrupt))
    assert any("was corrupt and ignored" in r for r in res.reports)


def test_tampered_masked_input_header_refused():
    res, *_ = run(FaultInjector().tamper(m.Kind.MASKED_INPUT, sender=5, offset=0))
    assert 5 not in res.survivors and any("refused a message from 5" in r for r in res.reports)


def test_replay_from_another_round_refused():
    _, old, _, _ = run(seed=1)
    replayed = [e for phase, e in old.log if phase == "masked_input:up" and e.sender == 3][0]
    faults = FaultInjector().drop(m.Kind.MASKED_INPUT, sender=3).inject("masked_input:up", replayed)
    res, *_ = run(faults, seed=2)
    assert 3 not in res.survivors and any("another round" in r for r in res.reports)


def test_replay_of_roster_from_another_round_refused_by_client():
    _, old, _, _ = run(seed=1)
    roster = [e for phase, e in old.log if phase == "share_keys:down"][0]
    _, _, _, clients = run(seed=2)
    with pytest.raises(ProtocolError):
        clients[1].receive(roster.payload)  # wrong stage now, and wrong round anyway


def test_message_for_another_recipient_refused():
    server, clients, _ = setup(security="semi-honest")
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    bundles = dict(server.advance())
    with pytest.raises(ProtocolError, match="addressed"):
        clients[2].receive(bundles[3])
    assert clients[2].stage is ClientStage.SHARES_SENT
    # A box re-addressed to the wrong client fails AEAD (AD binds the recipient) and is reported.
    b3 = m.decode(bundles[3])
    b2 = m.decode(bundles[2])
    swapped = m.ShareBundle(
        b2.round_id,
        m.SERVER,
        2,
        b2.senders,
        tuple(b3.boxes[i] if s in b3.senders else b2.boxes[i] for i, s in enumerate(b2.senders)),
    )
    clients[2].receive(swapped.to_bytes())
    req = m.UnmaskRequest(b2.round_id, m.SERVER, 2, tuple(sorted(IDS)), ()).to_bytes()
    resp = m.decode(clients[2].receive(req))
    assert len(resp.failed) >= 5


def test_duplicate_sender_refused():
    server, clients, _ = setup()
    c1 = clients[1].receive(server.open_round())
    server.receive(c1, sender=1)
    with pytest.raises(ProtocolError, match="duplicate"):
        server.receive(c1, sender=1)


def test_duplicate_injected_in_transport_is_reported_round_exact():
    _, first, _, _ = run(seed=1)
    dup = [e for phase, e in first.log if phase == "share_keys:up" and e.sender == 2][0]
    res, *_ = run(FaultInjector().inject("share_keys:up", dup), seed=1)
    assert any("duplicate ShareKeys from client 2" in r for r in res.reports)


def test_unknown_sender_refused():
    server, clients, _ = setup()
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    server.advance()
    intruder = m.MaskedInput(server.round_id, 999, m.SERVER, BITS, np.zeros(DIM, dtype=np.uint64))
    with pytest.raises(ProtocolError):
        server.receive(intruder.to_bytes(), sender=999)  # wrong stage and unknown id
    fake_share = m.ShareKeys(server.round_id, 999, m.SERVER, b"\x00" * 32, (), ())
    with pytest.raises(ProtocolError, match="unknown"):
        server.receive(fake_share.to_bytes(), sender=999)


def _client_at_unmasking(security="active"):
    """Every client has sent its masked input (and, in active mode, signed the survivor set)."""
    server, clients, _ = setup(security=security)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    deliver_all(server, clients, server.advance())
    if security == "active":
        deliver_all(server, clients, server.advance())
    return server, clients


@pytest.mark.parametrize("security", ["active", "semi-honest"])
def test_client_listed_as_both_dropped_and_survivor_refused(security):
    server, clients = _client_at_unmasking(security)
    rid = server.round_id
    req = m.UnmaskRequest(rid, m.SERVER, 1, tuple(sorted(IDS)), (4,)).to_bytes()
    before = clients[1].stage
    with pytest.raises(ProtocolError, match="both dropped and surviving"):
        clients[1].receive(req)
    assert clients[1].stage is before


def test_server_asking_both_shares_across_two_requests_refused():
    server, clients = _client_at_unmasking("semi-honest")
    rid = server.round_id
    first = m.decode(clients[1].receive(m.UnmaskRequest(rid, m.SERVER, 1, tuple(sorted(IDS)), ()).to_bytes()))
    assert 4 in first.self_owners and clients[1].stage is ClientStage.DONE
    others = tuple(c for c in IDS if c != 4)
    with pytest.raises(ProtocolError):
        clients[1].receive(m.UnmaskRequest(rid, m.SERVER, 1, others, (4,)).to_bytes())


@pytest.mark.parametrize("security", ["active", "semi-honest"])
def test_request_not_listing_us_or_below_threshold_refused(security):
    server, clients = _client_at_unmasking(security)
    rid = server.round_id
    with pytest.raises(ProtocolError, match="survivor"):
        clients[1].receive(m.UnmaskRequest(rid, m.SERVER, 1, tuple(c for c in IDS if c != 1), (1,)).to_bytes())
    with pytest.raises(ProtocolError, match="threshold"):
        clients[1].receive(m.UnmaskRequest(rid, m.SERVER, 1, (1, 2), tuple(range(3, 8))).to_bytes())
    with pytest.raises(ProtocolError, match="classify"):
        clients[1].receive(m.UnmaskRequest(rid, m.SERVER, 1, (1, 2, 3), ()).to_bytes())


def test_delayed_masked_input_counts_as_dropout():
    res, *_ = run(FaultInjector().delay(m.Kind.MASKED_INPUT, sender=6))
    assert 6 in res.dropped and any("refuses a MASKED_INPUT" in r for r in res.reports)


def test_abort_below_threshold_after_faults_reconstructs_nothing():
    server, clients, _ = setup(t=7)  # every response needed
    faults = FaultInjector().drop(m.Kind.UNMASK_RESPONSE, sender=2)
    with pytest.raises(AbortError):
        drive_round(server, clients, InProcessTransport(rng=np.random.default_rng(0), faults=faults))
    assert server.reconstructions == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_malformed_bytes_only_raise_protocol_error(data):
    with pytest.raises(ProtocolError):
        m.decode(data) if not data.startswith(b"SA") else m.decode(data + b"\xff" * 3)


@pytest.mark.parametrize("kind", list(m.Kind))
def test_truncated_or_padded_messages_refused(kind):
    from test_secagg_stages import REF  # reference messages of a seeded round

    good = REF["active"][kind]
    m.decode(good)
    for bad in (good[:-1], good + b"\x00", good[:27], b"SB" + good[2:], good[:2] + bytes([m.VERSION + 1]) + good[3:]):
        with pytest.raises(ProtocolError):
            m.decode(bad)
    server, clients, _ = setup()
    with pytest.raises(ProtocolError):
        server.receive(good[:-1], sender=1)
    with pytest.raises(ProtocolError):
        clients[1].receive(good[:-1])


def test_reprs_hide_secrets():
    shares = np.arange(16, dtype=np.uint32).reshape(1, 16)
    r = m.UnmaskResponse(b"r" * 16, 1, m.SERVER, (2,), shares, (), np.zeros((0, 16), np.uint32), ())
    assert "15" not in repr(r) and "hidden" in repr(r)
    y = m.MaskedInput(b"r" * 16, 1, m.SERVER, 8, np.array([123, 45], dtype=np.uint64))
    assert "123" not in repr(y)
    assert "_x" not in repr(SecAggClient(1, np.zeros(2, np.uint64), bits=8, policy=SEMI))


def test_check_in_coin_has_probability_p():
    """Each client decides alone with its own coin. 2000 clients, p = 0.3: the count is Binomial(2000, 0.3);
    two-sided test at alpha = 1e-6 (critical region from scipy.stats.binom)."""
    rid = b"\x05" * 16
    open_msg = m.RoundOpen(rid, m.SERVER, m.BROADCAST, 0.3, 8, 1, 2, 0, 0).to_bytes()
    src = SeededRandom(b"\x09" * 32)
    joined = sum(
        SecAggClient(i, np.zeros(1, np.uint64), bits=8, policy=SEMI, source=src).decide_check_in(open_msg) is not None
        for i in range(2000)
    )
    lo, hi = stats.binom.ppf(0.5e-6, 2000, 0.3), stats.binom.isf(0.5e-6, 2000, 0.3)
    assert lo <= joined <= hi
    for p, expect in ((0.0, 0), (1.0, 50)):
        o = m.RoundOpen(rid, m.SERVER, m.BROADCAST, p, 8, 1, 2, 0, 0).to_bytes()
        assert (
            sum(
                SecAggClient(i, np.zeros(1, np.uint64), bits=8, policy=SEMI).decide_check_in(o) is not None
                for i in range(50)
            )
            == expect
        )


def test_check_in_through_server_api():
    server = SecAggServer(bits=8, dim=2, threshold=2, p=0.5, security="semi-honest")
    open_msg = server.open_round()
    clients = [SecAggClient(i, np.ones(2, np.uint64), bits=8, policy=SEMI) for i in range(40)]
    joined = [
        c
        for c in clients
        if (msg := c.decide_check_in(open_msg)) is not None and server.receive(msg, sender=c.id) is None
    ]
    assert 0 < len(joined) < 40  # P[all or none] = 2 * 2^-40
    assert all(c.stage is ClientStage.DECLINED for c in clients if c not in joined)


def test_client_refuses_round_with_other_parameters():
    c = SecAggClient(1, np.zeros(3, np.uint64), bits=8, policy=SEMI)
    with pytest.raises(ProtocolError):
        c.decide_check_in(m.RoundOpen(b"r" * 16, m.SERVER, m.BROADCAST, 1.0, 9, 3, 2, 0, 0).to_bytes())
    assert c.stage is ClientStage.IDLE


@pytest.mark.parametrize("neighbours", [None, 8])
def test_unmask_requests_carry_enough_signatures_per_owner_and_no_more(neighbours):
    ids = tuple(range(1, 31))
    t = 21 if neighbours is None else 6
    server, clients, _ = setup(t=t, ids=ids, neighbours=neighbours)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    for _ in range(3):
        deliver_all(server, clients, server.advance())
    for u, b in server.advance():
        req = m.decode(b)
        owners = set(req.survivors) | set(req.dropped)
        for v in owners:  # what the client will check: t signers among v's share holders
            assert len(set(req.signers) & server._holders[v]) >= t
        two_hop = set().union(*(server._holders[v] for v in owners))
        assert len(req.signers) == t if neighbours is None else len(req.signers) < len(two_hop)
        m.decode(clients[u].receive(b))  # and the client accepts it
