"""The roster: a server may not shrink or hand-pick it (Bell et al. 2020's guarantee assumes corrupt clients
independent of the graph over a population the clients expect).

The reproduced attack uses the documented parameters: n = 1,000 expected clients, 10 % dropout, 5 % corrupt,
``secaggplus_parameters`` -> (k, t) = (74, 50). The server admits only 74 check-ins; with k + 1 = 75 > 74 every
client would take the roster as a full graph, whose active floor floor(2 * 74 / 3) + 1 = 50 the threshold meets,
and 50 colluders would hold t shares of the victim's secrets.
"""

from __future__ import annotations

import numpy as np
import pytest
from roundkit import BITS, adversarial_roster, deliver_all, make_round

from protocols import messages as m
from protocols.graph import roster_graph, secaggplus_parameters
from protocols.pool import RoundPlan
from protocols.security import ClientPolicy
from protocols.server import survivor_lists
from protocols.stages import ClientStage
from secagg_dp.crypto import aead, masking, shamir
from secagg_dp.crypto.keys import keypair_from_private
from secagg_dp.errors import ParameterError, ProtocolError

V = 1
K, T = secaggplus_parameters(1000, dropout_fraction=0.1, corrupt_fraction=0.05)
ADMITTED = tuple(range(1, K + 1))  # the 74 check-ins the server admits (V and 73 others)
COLLUDERS = set(ADMITTED[-T:])  # 50 corrupt clients among them


def test_documented_parameters():
    # Hand-computed from the rule's conditions in test_secagg_graph.py; the attack below is about them.
    assert (K, T) == (74, 50) and (2 * len(ADMITTED)) // 3 + 1 == T


@pytest.mark.parametrize("min_roster", [900, len(ADMITTED)])
def test_shrunk_roster_is_refused_in_active_mode(min_roster):
    """Every admitted client refuses the 74-client roster: below its minimum roster (900: 1,000 expected,
    less 10 % dropout) or, with a minimum it meets (74), because a roster of <= k + 1 clients is no SecAgg+
    roster."""
    server, clients, _, _ = make_round(5, T, ADMITTED, neighbours=K, min_roster=min_roster, dim=2, min_threshold=T)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    roster = adversarial_roster(server)
    why = "fewer than our minimum roster 900" if min_roster == 900 else "it would be a full graph"
    for cid in (V, *sorted(COLLUDERS)[:3]):
        with pytest.raises(ProtocolError, match=why):
            clients[cid].receive(roster)
        assert clients[cid].stage is ClientStage.KEYS_ADVERTISED  # nothing shared
    # An honest active server refuses to build such a round at all.
    with pytest.raises(ProtocolError, match="refuse to treat the roster as a full graph"):
        server.advance()


# -- a hand-picked roster of k + 2: the floor a client could take without knowing the population --------------
PICKED_COLLUDERS = tuple(range(2, T + 2))  # 50 corrupt clients
PICKED_HONEST = tuple(range(T + 2, T + 32))  # 30 honest check-ins, of which the server admits 25


def _hand_picked_roster(server):
    """The server's search (brute force over the rosters it may build): admit V, the 50 colluders and 25 of
    the 30 honest check-ins (76 = k + 2 clients), dropping honest clients in turn until the graph of the
    roster (a fresh seed per roster) puts every colluder among V's 74 neighbours (each try: 1/3, the chance
    that V's one non-neighbour among the 75 others is honest). Returns V's slice and V's holders."""
    for drop in range(len(PICKED_HONEST) - 4):
        ids = (V, *PICKED_COLLUDERS, *PICKED_HONEST[:drop], *PICKED_HONEST[drop + 5 :])
        roster = adversarial_roster(server, ids, recipient=V)
        holders = m.decode(roster).ids
        if set(PICKED_COLLUDERS) <= set(holders):
            return roster, holders
    raise AssertionError("no roster of the search puts every colluder next to V")


def _picked_round(min_roster):
    ids = (V, *PICKED_COLLUDERS, *PICKED_HONEST)
    server, clients, inputs, _ = make_round(5, T, ids, neighbours=K, min_roster=min_roster, dim=2, min_threshold=T)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    return server, clients, inputs


def test_active_secaggplus_policy_without_min_roster_cannot_be_built():
    """The default construction path: an active client with the documented degree and threshold but no
    population refuses to exist (its only population-free floor, k + 2, admits the attack below)."""
    with pytest.raises(ParameterError, match="Argument 'min_roster' is required.*neighbours=74"):
        ClientPolicy(neighbours=K, min_threshold=T)
    plan = RoundPlan(bits=BITS, dim=2, threshold=T, neighbours=K, security="active", round_id=bytes(16))
    with pytest.raises(ParameterError, match="min_roster"):
        plan.policy  # noqa: B018 (the property builds the policy)
    ClientPolicy(neighbours=K, min_threshold=T, security="semi-honest")  # the trusted-server mode needs none
    ClientPolicy(min_threshold=T)  # nor the full graph: its floor is t, and t > 2N'/3 on every roster it takes


def test_hand_picked_roster_of_k_plus_2_is_refused_with_the_population_floor():
    """n = 1,000 expected, (k, t) = (74, 50), 50 colluders. With the floor from the population (900) V
    refuses the 76-client roster the server picked; a client stating the population-free floor k + 2 = 76
    takes it, and the colluders' boxes from V give b_V and sk_V, hence x_V (the attack the floor stops)."""
    server, clients, _ = _picked_round(900)
    roster, _ = _hand_picked_roster(server)
    with pytest.raises(ProtocolError, match="76 clients, fewer than our minimum roster 900"):
        clients[V].receive(roster)
    assert clients[V].stage is ClientStage.KEYS_ADVERTISED  # nothing shared

    server, clients, inputs = _picked_round(K + 2)
    roster, holders = _hand_picked_roster(server)
    shares = m.decode(clients[V].receive(roster))
    rid, (enc_v, mask_v, _) = server.round_id, server._keys[V]
    points = {h: i + 1 for i, h in enumerate(sorted(holders))}  # SecAgg+ points: rank among V's holders
    b_sh, k_sh = {}, {}
    for c in PICKED_COLLUDERS:  # each colluder opens its box from V with its own channel key
        ((ck, _),) = masking.neighbour_secrets(
            clients[c]._enc, clients[c]._mask, [(V, enc_v, mask_v)], round_id=rid, own_id=c
        )
        box = shares.boxes[shares.recipients.index(c)]
        pt = m.SharePlaintext.from_bytes(aead.open_sealed(ck, box, aead.associated_data(rid, V, c)))
        b_sh[c], k_sh[c] = pt.self_share, pt.key_share

    def rebuild(part):
        hs = sorted(part)[:T]
        rows = np.stack([part[h] for h in hs])
        return shamir.decode(shamir.reconstruct([points[h] for h in hs], rows, threshold=T))

    b_v, kp = rebuild(b_sh), keypair_from_private(rebuild(k_sh))
    # V masks its input against the senders the server lists (the colluders, whose boxes V only stores)
    senders = PICKED_COLLUDERS
    bundle = m.ShareBundle(rid, m.SERVER, V, senders, tuple(shares.boxes[: len(senders)]))
    y_v = m.decode(clients[V].receive(bundle.to_bytes())).y
    pairwise = [
        (masking.pairwise_seed(kp, server._keys[w][1], round_id=rid, own_id=V, peer_id=w), masking.mask_sign(V, w))
        for w in senders
    ]
    mask = masking.mask_input(np.zeros(y_v.size, np.uint64), bits=BITS, self_seed=b_v, pairwise=pairwise)
    assert [(int(a) - int(b)) % (1 << BITS) for a, b in zip(y_v, mask, strict=True)] == inputs[V].tolist()


def test_roster_at_the_minimum_is_accepted_in_active_mode():
    ids = tuple(range(1, 13))
    server, clients, _, _ = make_round(5, 5, ids, neighbours=6, min_roster=12, dim=2)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    roster = adversarial_roster(server, recipient=V)
    assert m.decode(clients[V].receive(roster)).KIND is m.Kind.SHARE_KEYS
    server2, clients2, _, _ = make_round(5, 5, ids, neighbours=6, min_roster=12, dim=2)
    deliver_all(server2, clients2, [(m.BROADCAST, server2.open_round())])
    with pytest.raises(ProtocolError, match="fewer than our minimum roster 12"):
        clients2[V].receive(adversarial_roster(server2, ids[:-1], recipient=V))  # one check-in left out


def test_shrunk_roster_unmasks_the_victim_in_semi_honest_mode():
    """Semi-honest mode trusts the server with the roster: the 74 admitted clients run a full graph with
    t = 50, and the 50 colluders' boxes from V give the server b_V and sk_V, hence x_V."""
    server, clients, inputs, _ = make_round(5, T, ADMITTED, neighbours=K, security="semi-honest", dim=3)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())  # the roster of 74, taken as a full graph
    replies = deliver_all(server, clients, server.advance())  # bundles -> masked inputs
    rid, y_v = server.round_id, m.decode(replies[V]).y
    b_sh, k_sh = {}, {}
    for c in sorted(COLLUDERS):
        ck = clients[c]._peers[V][0]
        pt = m.SharePlaintext.from_bytes(aead.open_sealed(ck, clients[c]._box(V), aead.associated_data(rid, V, c)))
        b_sh[c], k_sh[c] = pt.self_share, pt.key_share
    points = {w: i + 1 for i, w in enumerate(ADMITTED)}  # full graph: rank in the roster

    def rebuild(shares):
        hs = sorted(shares)
        return shamir.decode(
            shamir.reconstruct([points[h] for h in hs], np.stack([shares[h] for h in hs]), threshold=T)
        )

    b_v, kp = rebuild(b_sh), keypair_from_private(rebuild(k_sh))
    pairwise = [
        (masking.pairwise_seed(kp, server._keys[w][1], round_id=rid, own_id=V, peer_id=w), masking.mask_sign(V, w))
        for w in ADMITTED
        if w != V
    ]
    mask = masking.mask_input(np.zeros(y_v.size, np.uint64), bits=BITS, self_seed=b_v, pairwise=pairwise)
    x_v = [(int(a) - int(b)) % (1 << BITS) for a, b in zip(y_v, mask, strict=True)]
    assert x_v == inputs[V].tolist()


# -- the roster commitment: one roster for everyone, neighbour-only entries with a membership proof ----------
def _slices(server, clients):
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    return dict(server.advance())


def test_secaggplus_client_gets_only_its_holders_entries_with_a_proof():
    ids = tuple(range(1, 41))
    server, clients, _, _ = make_round(5, 5, ids, neighbours=6, dim=2)
    out = _slices(server, clients)
    assert set(out) == set(ids)  # one message per client, none broadcast
    msg = m.decode(out[V])
    assert msg.size == 40 and set(msg.ids) == server._holders[V] and len(msg.ids) == 7
    assert m.decode(clients[V].receive(out[V])).KIND is m.Kind.SHARE_KEYS


@pytest.mark.parametrize("what", ["proof", "entry", "index", "missing"])
def test_forged_membership_proof_is_refused(what):
    ids = tuple(range(1, 41))
    server, clients, _, _ = make_round(5, 5, ids, neighbours=6, dim=2)
    honest = m.decode(_slices(server, clients)[V])
    proof, enc, idx, rows = honest.proof.copy(), honest.enc_pks.copy(), list(honest.indices), list(range(7))
    if what == "proof":
        proof[0, 0] ^= 1
    elif what == "entry":  # another (validly signed) key in a neighbour's row
        enc[0] = np.frombuffer(server._keys[honest.ids[1]][0], np.uint8)
    elif what == "index":  # one row claimed at another leaf (still ascending)
        gap = next(p for p in range(len(idx) - 1) if idx[p + 1] - idx[p] > 1)
        idx[gap] += 1
    else:  # one holder left out
        rows = [r for r in rows if honest.ids[r] != V][1:] + [honest.ids.index(V)]
        rows.sort()
    forged = m.KeyRoster(
        honest.round_id,
        m.SERVER,
        V,
        honest.size,
        honest.root,
        tuple(idx[r] for r in rows),
        tuple(honest.ids[r] for r in rows),
        enc[rows],
        honest.mask_pks[rows].copy(),
        honest.signatures[rows].copy(),
        proof,
    ).to_bytes()
    with pytest.raises(ProtocolError, match="membership proof|exactly the entries"):
        clients[V].receive(forged)
    assert clients[V].stage is ClientStage.KEYS_ADVERTISED


def test_two_clients_shown_different_rosters_are_refused():
    """The server shows A = {1, 2, 3, 4} the roster of all 9 check-ins and B = {5, 6, 7, 8} a roster without
    client 9 (each one consistent and validly signed; client 9 is then treated as dropped). Every client signs
    its own roster's statement in the consistency round, so neither side can show t = 7 signers on one
    statement: no client unmasks."""
    ids, t = tuple(range(1, 10)), 7
    a, b = {1, 2, 3, 4}, {5, 6, 7, 8}
    server, clients, _, _ = make_round(5, t, ids, min_roster=8, dim=2)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    rosters = {"a": adversarial_roster(server), "b": adversarial_roster(server, ids=ids[:-1])}
    side = {c: "a" if c in a else "b" for c in a | b}
    shares = {c: m.decode(clients[c].receive(rosters[side[c]])) for c in sorted(a | b)}
    rid = server.round_id
    for v in sorted(a | b):  # forward every box its recipient can open
        senders = tuple(u for u in sorted(a | b) if v in shares[u].recipients and u in clients[v]._peers)
        boxes = tuple(shares[u].boxes[shares[u].recipients.index(v)] for u in senders)
        clients[v].receive(m.ShareBundle(rid, m.SERVER, v, senders, boxes).to_bytes())
    graphs = {s: m.decode(r) for s, r in rosters.items()}
    lists = {s: survivor_lists(rid, roster_graph(g.ids, None, g.graph_seed), a | b) for s, g in graphs.items()}
    sigs = {c: m.decode(clients[c].receive(lists[side[c]].message(c).to_bytes())).signature for c in sorted(a | b)}
    for c in (1, 5):
        known = tuple(sorted(set(clients[c]._box_ids.tolist()) | {c}))
        own = a if c in a else b
        for signers, why in [
            (tuple(sorted(a | b)), f"signature of client {min(b - own or a - own)} is invalid"),  # everyone's
            (tuple(sorted(own)), "fewer than threshold 7 survivor-set signatures"),  # its own side's
        ]:
            arr = np.frombuffer(b"".join(sigs[s] for s in signers), np.uint8).reshape(-1, m.SIG_LEN).copy()
            req = m.UnmaskRequest(rid, m.SERVER, c, known, (), signers, arr).to_bytes()
            with pytest.raises(ProtocolError, match=why):
                clients[c].receive(req)
        assert clients[c].stage is ClientStage.SURVIVORS_SIGNED  # nothing revealed


@pytest.mark.parametrize("n", [60, pytest.param(600, marks=pytest.mark.slow)])  # 600: CI only
def test_secaggplus_messages_carry_the_neighbourhood_only(n):
    """Roster slices: k + 1 rows and a multiproof within the bound of secagg_dp.crypto.merkle; survivor
    lists: the ids of the two-hop neighbourhood (the holders of every secret the client holds a share of,
    computed here from the server's holder sets), a few bitmap leaves, and nothing per other client."""
    k, ids = 6, tuple(range(1, n + 1))
    server, clients, _, _ = make_round(5, 5, ids, neighbours=k, dim=2)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    slices = server.advance()
    depth = (n - 1).bit_length()
    for _, b in slices[::7]:
        msg = m.decode(b)
        assert len(msg.ids) == k + 1 and len(msg.proof) < (k + 1) * (depth - 2 + 2)  # floor(log2 7) = 2
    deliver_all(server, clients, slices)
    deliver_all(server, clients, server.advance())  # bundles -> masked inputs
    for u, b in server.advance()[::7]:
        msg = m.decode(b)
        two_hop = set().union(*(server._holders[v] for v in server._holders[u]))
        assert msg.near_ids.tolist() == sorted(two_hop) and msg.count == n
        assert len(msg.chunk_indices) <= 2 and len(msg.proof) <= 2 * max(1, (-(-n // 256) - 1).bit_length())


def test_any_change_to_the_roster_is_a_fresh_graph():
    """The seed hashes the committed roster: leaving out one check-in, or one colluder re-keying its entry,
    gives another seed and other neighbourhoods (what a grinding server pays one roster for)."""
    ids = tuple(range(1, 41))
    server, clients, _, _ = make_round(5, 5, ids, neighbours=6, dim=2)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    base = m.decode(adversarial_roster(server))
    fewer = m.decode(adversarial_roster(server, ids=ids[:-1]))
    rekeyed = m.decode(adversarial_roster(server, enc={40: bytes(range(32))}))
    seeds = {base.graph_seed, fewer.graph_seed, rekeyed.graph_seed}
    assert len(seeds) == 3
    rows = [roster_graph(r.ids, 6, r.graph_seed).neighbour_sets([V])[V] for r in (base, fewer, rekeyed)]
    assert rows[0] != rows[1] and rows[0] != rows[2]
