"""Attacks by an active server (and a few corrupt clients), each run against both security modes.

Each test plays the adversary by hand: it reads the honest server's outgoing messages and rewrites them,
or sends what a corrupt client would send. Where the attack can be carried out against the semi-honest
protocol, the test completes it there (recovering one client's input, compared with the input itself),
and shows it failing against the active protocol (Bonawitz et al. 2017, Sec. 6; Bell et al. 2020).
"""

from __future__ import annotations

import hashlib
import tracemalloc

import numpy as np
import pytest
from roundkit import BITS, DIM, adversarial_roster, deliver_all, exact_sum, make_round

from protocols import messages as m
from protocols.pki import advertise_statement, consistency_statement
from protocols.round import drive_round, run_secagg_round
from protocols.server import survivor_lists
from protocols.stages import ClientStage
from protocols.transport import Envelope, FaultInjector, InProcessTransport
from secagg_dp.crypto import aead, masking, shamir, signing
from secagg_dp.crypto.keys import generate_keypair, keypair_from_private
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import AuthenticationError, ProtocolError

V = 1  # the victim
HALF = shamir.PIECES_PER_32_BYTES


def unmask(y: np.ndarray, b_seed: bytes, sk_mask: bytes, peers: dict[int, bytes], round_id: bytes) -> list[int]:
    """x_V from y_V, b_V and sk_V: subtract PRG(b_V) and every pairwise mask (the adversary's last step)."""
    kp = keypair_from_private(sk_mask)
    pairwise = [
        (masking.pairwise_seed(kp, pk, round_id=round_id, own_id=V, peer_id=w), masking.mask_sign(V, w))
        for w, pk in peers.items()
    ]
    mask = masking.mask_input(np.zeros(y.size, np.uint64), bits=BITS, self_seed=b_seed, pairwise=pairwise)
    return [(int(a) - int(b)) % (1 << BITS) for a, b in zip(y, mask, strict=True)]


def reconstruct(shares: dict[int, np.ndarray], points: dict[int, int], t: int) -> bytes:
    holders = sorted(shares)[:t]
    rows = np.stack([shares[h] for h in holders])
    return shamir.decode(shamir.reconstruct([points[h] for h in holders], rows, threshold=t))


def _to_keys_stage(server, clients):
    """Every client checks in; returns the honest roster's entries as the server holds them."""
    replies = deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    assert set(replies) == set(clients)
    return server


# -- 1. key substitution ---------------------------------------------------------------------------------
def test_key_substitution_unmasks_the_victim_in_semi_honest_mode():
    """V is shown server keys for everyone else, everyone else a server key for V; the server re-encrypts
    every box, the round completes with the exact sum and no report, and the server holds all of V's
    shares: it recovers x_V. (n, t) = (8, 7)."""
    ids = tuple(range(1, 9))
    server, clients, inputs, _ = make_round(3, 7, ids, security="semi-honest")
    _to_keys_stage(server, clients)
    rid, src = server.round_id, SeededRandom(b"\x07" * 32)
    fake = {w: generate_keypair(source=src) for w in ids}  # fake[w]: the key the server shows in w's place
    real = {w: server._keys[w][0] for w in ids}
    to_v = adversarial_roster(server, enc={w: fake[w].public for w in ids if w != V})
    to_rest = adversarial_roster(server, enc={V: fake[V].public})
    server.advance()  # the honest roster is discarded; the server moves on to collecting shares
    for cid, c in clients.items():
        server.receive(c.receive(to_v if cid == V else to_rest), sender=cid)
    stolen: dict[int, m.SharePlaintext] = {}

    def rebox(sender: int, recipient: int, box: bytes) -> bytes:
        ad = aead.associated_data(rid, sender, recipient)
        if V not in (sender, recipient):
            return box
        other = recipient if sender == V else sender
        # The box was sealed under the key the sender computed with the fake key of the other end.
        ck_in = masking.channel_key(fake[recipient], real[sender], round_id=rid, own_id=recipient, peer_id=sender)
        pt = aead.open_sealed(ck_in, box, ad)
        if sender == V:
            stolen[other] = m.SharePlaintext.from_bytes(pt)
        ck_out = masking.channel_key(fake[sender], real[recipient], round_id=rid, own_id=sender, peer_id=recipient)
        return aead.seal(ck_out, pt, ad, source=src)

    for r, b in server.advance():
        bundle = m.decode(b)
        boxes = tuple(rebox(s, r, box) for s, box in zip(bundle.senders, bundle.boxes, strict=True))
        reply = clients[r].receive(m.ShareBundle(rid, m.SERVER, r, bundle.senders, boxes).to_bytes())
        server.receive(reply, sender=r)
        if r == V:
            y_v = m.decode(reply).y  # the server keeps only the running sum; it sees y_V on arrival
    deliver_all(server, clients, server.advance())
    server.advance()
    assert server.outcome.aggregate.tolist() == exact_sum(inputs, ids) and server.reports == []
    points = {w: i + 1 for i, w in enumerate(ids)}
    b_v = reconstruct({w: p.self_share for w, p in stolen.items()}, points, 7)
    sk_v = reconstruct({w: p.key_share for w, p in stolen.items()}, points, 7)
    peers = {w: server._keys[w][1] for w in ids if w != V}
    assert unmask(y_v, b_v, sk_v, peers, rid) == inputs[V].tolist()


@pytest.mark.parametrize("n,t,k", [(8, 7, None), (20, 19, None), (12, 7, 8)])
def test_key_substitution_is_refused_in_active_mode(n, t, k):
    ids = tuple(range(1, n + 1))
    server, clients, _, _ = make_round(3, t, ids, neighbours=k)
    _to_keys_stage(server, clients)
    fake = {w: generate_keypair(source=SeededRandom(bytes([w]) * 32)).public for w in ids}
    to_v = adversarial_roster(server, recipient=V if k else None, enc={w: fake[w] for w in ids if w != V})
    to_rest = {c: adversarial_roster(server, recipient=c if k else None, enc={V: fake[V]}) for c in ids}
    with pytest.raises(ProtocolError, match="fails signature verification"):
        clients[V].receive(to_v)
    assert clients[V].stage is ClientStage.KEYS_ADVERTISED  # V sent no share of anything
    refused = 0
    for cid in ids[1:]:
        try:
            clients[cid].receive(to_rest[cid])
        except ProtocolError as e:
            assert "fails signature verification" in str(e)
            refused += 1
    assert refused >= 1  # every client that uses V's entry (V's neighbours) refuses it


def test_server_cannot_sign_for_a_client():
    # The only way to make the substitution pass would be a signature by V's identity key; a signature by
    # any other key (here: a key the server made up and registered nowhere) fails against the registry.
    server, clients, _, ids_keys = make_round(3, 6, tuple(range(1, 9)))
    body = advertise_statement(server.round_id, V, bytes(32), bytes(32))
    forged = signing.generate_signing_key(source=SeededRandom(b"\x01" * 32)).sign(signing.LABEL_ADVERTISE_KEYS, body)
    with pytest.raises(AuthenticationError, match="signature failed"):
        server.registry.verify(V, signing.LABEL_ADVERTISE_KEYS, body, forged)
    server.registry.verify(V, signing.LABEL_ADVERTISE_KEYS, body, ids_keys[V].sign(signing.LABEL_ADVERTISE_KEYS, body))


# -- 2. inconsistent survivor lists ------------------------------------------------------------------------
def split_attack(security: str, t: int, group_a: set[int], group_b: set[int], colluders: set[int]):
    """Tell group A (with V) "everyone survived" and group B "V dropped"; colluders sign both sets and hand
    over their shares. Returns (recovered x_V or None, honest clients that refused, inputs[V])."""
    ids = tuple(sorted(group_a | group_b | colluders))
    server, clients, inputs, identities = make_round(5, t, ids, security=security)
    _ = deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    replies = deliver_all(server, clients, server.advance())
    rid, y_v = server.round_id, m.decode(replies[V]).y  # seen on arrival; the server keeps only the sum
    everyone, without_v = ids, tuple(c for c in ids if c != V)
    sets = {c: (without_v if c in group_b else everyone) for c in ids}
    sigs: dict[tuple[int, ...], dict[int, bytes]] = {everyone: {}, without_v: {}}
    if security == "active":
        server.advance()  # the honest survivor lists are discarded; the adversary commits to two sets
        lists = {s: survivor_lists(rid, server._graph, set(s)) for s in sigs}
        for c in sorted(group_a | group_b):
            reply = m.decode(clients[c].receive(lists[sets[c]].message(c).to_bytes()))
            sigs[sets[c]][c] = reply.signature
        for c in colluders:  # corrupt clients sign whatever helps
            for s, lst in lists.items():
                body = consistency_statement(rid, server._roster_statement, lst.root, lst.count)
                sigs[s][c] = identities[c].sign(signing.LABEL_SURVIVOR_SET, body)
    b_shares, k_shares, refused = {}, {}, []
    for c in sorted(group_a | group_b):
        alive, gone = (without_v, (V,)) if c in group_b else (everyone, ())
        signers = tuple(sorted(sigs[sets[c]]))
        arr = np.frombuffer(b"".join(sigs[sets[c]][s] for s in signers), np.uint8).reshape(-1, m.SIG_LEN).copy()
        req = m.UnmaskRequest(rid, m.SERVER, c, alive, gone, signers, arr).to_bytes()
        try:
            resp = m.decode(clients[c].receive(req))
        except ProtocolError as e:
            refused.append((c, str(e)))
            continue
        b_shares.update({c: row for o, row in zip(resp.self_owners, resp.self_shares, strict=True) if o == V})  # noqa: B035 (one owner is V)
        k_shares.update({c: row for o, row in zip(resp.key_owners, resp.key_shares, strict=True) if o == V})  # noqa: B035 (one owner is V)
    for c in colluders:  # a colluder opens its box from V
        ck = clients[c]._peers[V][0]
        pt = m.SharePlaintext.from_bytes(aead.open_sealed(ck, clients[c]._box(V), aead.associated_data(rid, V, c)))
        b_shares[c], k_shares[c] = pt.self_share, pt.key_share
    points = {w: i + 1 for i, w in enumerate(ids)}
    if len(b_shares) < t or len(k_shares) < t:
        return None, refused, inputs[V].tolist()
    roster_masks = {w: server._keys[w][1] for w in ids if w != V}
    x_v = unmask(y_v, reconstruct(b_shares, points, t), reconstruct(k_shares, points, t), roster_masks, rid)
    return x_v, refused, inputs[V].tolist()


def test_inconsistent_survivor_lists_unmask_the_victim_in_semi_honest_mode():
    # t = 4 <= n/2 = 4: no colluder needed (c >= 2t - n = 0).
    x_v, refused, truth = split_attack("semi-honest", 4, {1, 2, 3, 4}, {5, 6, 7, 8}, set())
    assert refused == [] and x_v == truth


def test_inconsistent_survivor_lists_fail_in_active_mode_within_the_threat_model():
    # n = 8, t = 6 > 2n/3; c = 2 < n/3 colluders sign both sets, but each set gathers only 3 + 2 = 5 < t
    # signatures, so every honest client refuses to reveal anything.
    x_v, refused, _ = split_attack("active", 6, {1, 2, 3}, {4, 5, 6}, {7, 8})
    assert x_v is None and [c for c, _ in refused] == [1, 2, 3, 4, 5, 6]
    assert all("fewer than threshold 6 survivor-set signatures" in why for _, why in refused)


def test_inconsistent_survivor_lists_need_2t_minus_n_colluders_in_active_mode():
    # The threshold is what protects: with c = 2t - n = 4 colluders (beyond the n/3 of the threat model)
    # both sets reach t = 6 signatures and the attack succeeds; the docs state this bound.
    x_v, refused, truth = split_attack("active", 6, {1, 2}, {3, 4}, {5, 6, 7, 8})
    assert refused == [] and x_v == truth


def test_consistency_round_refuses_a_request_contradicting_the_signed_set():
    server, clients, _, _ = make_round(5, 6, tuple(range(1, 9)))
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    for _ in range(3):  # roster, bundles, survivor lists: everyone signs U3 = all
        deliver_all(server, clients, server.advance())
    honest = m.decode(dict(server.advance())[2])
    lie = m.UnmaskRequest(
        honest.round_id,
        m.SERVER,
        2,
        tuple(c for c in honest.survivors if c != V),
        (V,),
        honest.signers,
        honest.signatures.copy(),
    )
    with pytest.raises(ProtocolError, match="contradicts the survivor set we signed"):
        clients[2].receive(lie.to_bytes())
    assert clients[2].stage is ClientStage.SURVIVORS_SIGNED
    resp = m.decode(clients[2].receive(honest.to_bytes()))  # the honest request is still answered
    assert V in resp.self_owners


# -- 3. threshold from the server -------------------------------------------------------------------------
def test_one_share_is_the_secret_when_t_is_1():
    # Why a client must refuse t = 1: the sharing polynomial is then constant, so any one box holds it.
    secret = bytes(range(32))
    shares = shamir.share([secret], threshold=1, points=[5, 9], source=SeededRandom(b"\x02" * 32))
    assert shamir.decode(shares[0]) == secret


@pytest.mark.parametrize("security", ["active", "semi-honest"])
@pytest.mark.parametrize("t,k", [(1, 0), (2, 0), (4, 0), (6, 8)])
def test_client_refuses_a_round_below_its_own_threshold_or_with_another_degree(security, t, k):
    server, clients, _, _ = make_round(5, 6, tuple(range(1, 9)), security=security)
    evil = m.RoundOpen(
        server.round_id, m.SERVER, m.BROADCAST, 1.0, BITS, DIM, t, k, m.SECURITY_CODES[security]
    ).to_bytes()
    with pytest.raises(ProtocolError, match="below our minimum" if k == 0 else "neighbours=8"):
        clients[V].receive(evil)
    assert clients[V].stage is ClientStage.IDLE


def test_client_refuses_a_round_announced_in_the_weaker_mode():
    server, clients, _, _ = make_round(5, 6, tuple(range(1, 9)))
    downgrade = m.RoundOpen(server.round_id, m.SERVER, m.BROADCAST, 1.0, BITS, DIM, 6, 0, 0).to_bytes()
    with pytest.raises(ProtocolError, match="security mode"):
        clients[V].receive(downgrade)


def test_active_client_refuses_a_threshold_unsafe_for_the_roster_it_receives():
    # Policy minimum 3, but the roster has 8 clients: t = 3 <= 2n/3, so the active client refuses it.
    # An honest active server refuses such a round itself (clean abort, nothing shared) ...
    act_server, act_clients, _, _ = make_round(5, 3, tuple(range(1, 9)))
    deliver_all(act_server, act_clients, [(m.BROADCAST, act_server.open_round())])
    with pytest.raises(ProtocolError, match="unsafe"):
        act_server.advance()
    # ... and a client checks it too, on whatever roster an active server sends.
    with pytest.raises(ProtocolError, match="unsafe against an active server"):
        act_clients[V].receive(adversarial_roster(act_server))


# -- 4. forged sender ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("security", ["active", "semi-honest"])
def test_masked_input_in_another_clients_name_is_refused(security):
    server, clients, inputs, _ = make_round(5, 6, tuple(range(1, 9)), security=security)
    forged = m.MaskedInput(server.round_id, 5, m.SERVER, BITS, np.full(DIM, 12345, np.uint64)).to_bytes()
    faults = FaultInjector().inject("masked_input:up", Envelope(3, m.SERVER, forged))  # on client 3's channel
    res = drive_round(server, clients, InProcessTransport(rng=np.random.default_rng(0), faults=faults))
    assert any("arrived on client 3's channel" in r for r in res.reports)
    assert res.survivors == frozenset(inputs) and res.aggregate.tolist() == exact_sum(inputs, inputs)


def test_without_the_channel_identity_the_forgery_would_be_accepted():
    # The message itself carries nothing that proves its sender; only the transport's identity does.
    server, clients, _, _ = make_round(5, 6, tuple(range(1, 9)))
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    server.advance()
    forged = m.MaskedInput(server.round_id, 5, m.SERVER, BITS, np.full(DIM, 12345, np.uint64)).to_bytes()
    with pytest.raises(ProtocolError, match="forgery"):
        server.receive(forged, sender=3)
    server.receive(forged, sender=5)  # had the transport reported client 5, it would be summed
    assert 5 in server._masked and server._acc.tolist() == [12345] * DIM  # the only input summed so far


# -- 5. low-order X25519 keys -----------------------------------------------------------------------------
@pytest.mark.parametrize("security", ["active", "semi-honest"])
@pytest.mark.parametrize("bad_key", [bytes(32), b"\x01" + bytes(31)])
def test_low_order_key_drops_only_that_client(security, bad_key):
    server, clients, inputs, identities = make_round(5, 6, tuple(range(1, 9)), security=security)
    evil = 4

    def zero_key(payload: bytes) -> bytes:  # the corrupt client signs its own bad key
        msg = m.decode(payload)
        sig = bytes(m.SIG_LEN)
        if security == "active":
            sig = identities[evil].sign(
                signing.LABEL_ADVERTISE_KEYS, advertise_statement(msg.round_id, evil, bad_key, msg.mask_pk)
            )
        return m.AdvertiseKeys(msg.round_id, evil, m.SERVER, bad_key, msg.mask_pk, sig).to_bytes()

    faults = FaultInjector().tamper(m.Kind.ADVERTISE_KEYS, sender=evil, fn=zero_key)
    res = drive_round(server, clients, InProcessTransport(rng=np.random.default_rng(1), faults=faults))
    assert any("low-order" in r for r in res.reports)
    assert res.survivors == frozenset(inputs) - {evil}
    assert res.aggregate.tolist() == exact_sum(inputs, res.survivors)


# -- 6. memory amplification --------------------------------------------------------------------------------
def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    except ProtocolError:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("sender", [99, 3])  # never checked in / checked in but oversized
def test_oversized_message_refused_before_parsing(sender):
    server, clients, _, _ = make_round(5, 6, tuple(range(1, 9)))
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    server.advance()
    big = m.MaskedInput(server.round_id, sender, m.SERVER, BITS, np.zeros(1 << 20, np.uint64)).to_bytes()  # 8 MiB
    with pytest.raises(ProtocolError, match="unknown or excluded" if sender == 99 else "more than the cap"):
        server.receive(big, sender=sender)
    # Parsing it would allocate at least its own size again; the refusal allocates almost nothing.
    assert _peak_bytes(lambda: server.receive(big, sender=sender)) < len(big) // 64


def test_oversized_bundle_refused_by_the_client():
    server, clients, _, _ = make_round(5, 6, tuple(range(1, 9)))
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    bundle = m.decode(dict(server.advance())[V])
    padded = m.ShareBundle(
        bundle.round_id, m.SERVER, V, bundle.senders, bundle.boxes[:-1] + (bundle.boxes[-1] + bytes(1 << 20),)
    ).to_bytes()
    with pytest.raises(ProtocolError, match="exceeds the cap"):
        clients[V].receive(padded)
    assert clients[V].stage is ClientStage.SHARES_SENT


# -- 8. replay across runs with the same seed ----------------------------------------------------------------
def test_message_from_an_earlier_run_with_the_same_seed_is_refused(monkeypatch):
    from protocols import client as client_mod

    inp = {c: np.full(3, c, np.uint64) for c in range(10, 16)}
    captured: dict[int, bytes] = {}
    orig = client_mod.SecAggClient._on_bundle

    def record(self, msg):
        captured[self.id] = orig(self, msg)
        return captured[self.id]

    monkeypatch.setattr(client_mod.SecAggClient, "_on_bundle", record)
    run_secagg_round(inp, bits=BITS, threshold=5, seed=7)
    old = captured[10]

    def replay(self, msg):
        out = orig(self, msg)
        return old if self.id == 10 else out

    monkeypatch.setattr(client_mod.SecAggClient, "_on_bundle", replay)
    res = run_secagg_round(inp, bits=BITS, threshold=5, seed=7)
    assert 10 not in res.survivors and any("another round" in r for r in res.reports)
    assert res.aggregate.tolist() == exact_sum(inp, res.survivors)


def test_masked_input_from_an_earlier_execution_with_the_same_round_id_is_refused(monkeypatch):
    """The caller pins the round id and reuses it; each execution's round id still binds a fresh server nonce
    (protocols.wire.execution_round_id), so client 10's MaskedInput from the first execution, replayed in the
    second, names another round: refused and reported, and the sum is that of the others (Python-int oracle).
    Before, the replay was accepted and the sum came out wrong without a report."""
    from protocols import client as client_mod

    inp = {c: np.full(3, c, np.uint64) for c in range(10, 16)}
    rid = b"\x05" * 16
    captured: dict[int, bytes] = {}
    orig = client_mod.SecAggClient._on_bundle

    def record(self, msg):
        captured[self.id] = orig(self, msg)
        return captured[self.id]

    monkeypatch.setattr(client_mod.SecAggClient, "_on_bundle", record)
    first = run_secagg_round(inp, bits=BITS, threshold=5, round_id=rid, workers=1)
    assert first.aggregate.tolist() == exact_sum(inp, inp)
    old = captured[10]

    def replay(self, msg):
        out = orig(self, msg)
        return old if self.id == 10 else out

    monkeypatch.setattr(client_mod.SecAggClient, "_on_bundle", replay)
    res = run_secagg_round(inp, bits=BITS, threshold=5, round_id=rid, workers=1)
    assert 10 not in res.survivors and any("another round" in r for r in res.reports)
    assert res.aggregate.tolist() == exact_sum(inp, res.survivors)


def test_round_id_on_the_wire_is_fresh_per_execution_and_reproducible_when_seeded():
    from protocols.server import SecAggServer
    from protocols.wire import execution_round_id

    label = b"\x05" * 16
    kw = {"bits": BITS, "dim": 2, "threshold": 2, "security": "semi-honest", "round_id": label}
    a, b = SecAggServer(**kw), SecAggServer(**kw)  # os.urandom nonces
    assert a.label == b.label == label and a.round_id != b.round_id and label not in (a.round_id, b.round_id)
    s1 = SecAggServer(**kw, source=SeededRandom(b"\x09" * 32))
    s2 = SecAggServer(**kw, source=SeededRandom(b"\x09" * 32))
    nonce = SeededRandom(b"\x09" * 32).bytes(16)  # the first 16 bytes a seeded source gives
    assert s1.round_id == s2.round_id == execution_round_id(label, nonce)
    # SHA-256(label || label || nonce)[:16], written out with hashlib
    want = hashlib.sha256(b"secagg-dp/v3/execution-round-id\x00" + label + nonce).digest()[:16]
    assert s1.round_id == want and m.decode(s1.open_round()).round_id == want


# -- 7. scale: field-size cap on the full graph, neighbourhood-local points for SecAgg+ ---------------------
def _check_in_many(server, n: int) -> None:
    kp = generate_keypair(source=SeededRandom(b"\x03" * 32))  # key reuse is harmless for this count test
    server.open_round()
    for u in range(n):
        server.receive(m.AdvertiseKeys(server.round_id, u, m.SERVER, kp.public, kp.public).to_bytes(), sender=u)


@pytest.mark.slow
def test_full_graph_server_refuses_check_ins_beyond_its_field():
    server = make_round(5, 2, (1, 2), security="semi-honest", dim=1)[0]
    _check_in_many(server, shamir.MAX_HOLDERS)
    extra = m.AdvertiseKeys(server.round_id, shamir.MAX_HOLDERS, m.SERVER, *server._keys[0][:2]).to_bytes()
    with pytest.raises(ProtocolError, match="round is full"):
        server.receive(extra, sender=shamir.MAX_HOLDERS)
    assert len(server._keys) == shamir.MAX_HOLDERS  # refused, not crashed; the round goes on


@pytest.mark.slow
def test_secaggplus_server_takes_more_clients_than_the_field_has_points():
    n, k = shamir.MAX_HOLDERS + 1000, 4
    server = make_round(5, 3, (1, 2), neighbours=k, security="semi-honest", dim=1)[0]
    _check_in_many(server, n)
    out = server.advance()  # one roster slice per client
    assert len(out) == n and m.decode(out[0][1]).size == n
    for u in range(0, n, 997):  # every neighbourhood uses points 1..k+1 only
        assert sorted(server._points[u].values()) == list(range(1, k + 2))
