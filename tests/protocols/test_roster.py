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
from protocols.graph import secaggplus_parameters
from protocols.stages import ClientStage
from secagg_dp.crypto import aead, masking, shamir
from secagg_dp.crypto.keys import keypair_from_private
from secagg_dp.errors import ProtocolError

V = 1
K, T = secaggplus_parameters(1000, dropout_fraction=0.1, corrupt_fraction=0.05)
ADMITTED = tuple(range(1, K + 1))  # the 74 check-ins the server admits (V and 73 others)
COLLUDERS = set(ADMITTED[-T:])  # 50 corrupt clients among them


def test_documented_parameters():
    # Hand-computed from the rule's conditions in test_secagg_graph.py; the attack below is about them.
    assert (K, T) == (74, 50) and (2 * len(ADMITTED)) // 3 + 1 == T


@pytest.mark.parametrize("min_roster", [900, None])
def test_shrunk_roster_is_refused_in_active_mode(min_roster):
    """Every admitted client refuses the 74-client roster: below its minimum roster (900: 1,000 expected,
    less 10 % dropout) or, without one, because a roster of <= k + 1 clients is no SecAgg+ roster."""
    server, clients, _, _ = make_round(5, T, ADMITTED, neighbours=K, min_roster=min_roster, dim=2, min_threshold=T)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    roster = adversarial_roster(server)
    why = "fewer than our minimum roster 900" if min_roster else "it would be a full graph"
    for cid in (V, *sorted(COLLUDERS)[:3]):
        with pytest.raises(ProtocolError, match=why):
            clients[cid].receive(roster)
        assert clients[cid].stage is ClientStage.KEYS_ADVERTISED  # nothing shared
    # An honest active server refuses to build such a round at all.
    with pytest.raises(ProtocolError, match="refuse to treat the roster as a full graph"):
        server.advance()


def test_roster_at_the_minimum_is_accepted_in_active_mode():
    ids = tuple(range(1, 13))
    server, clients, _, _ = make_round(5, 5, ids, neighbours=6, min_roster=12, dim=2)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    roster = adversarial_roster(server)
    assert m.decode(clients[V].receive(roster)).KIND is m.Kind.SHARE_KEYS
    server2, clients2, _, _ = make_round(5, 5, ids, neighbours=6, min_roster=12, dim=2)
    deliver_all(server2, clients2, [(m.BROADCAST, server2.open_round())])
    with pytest.raises(ProtocolError, match="fewer than our minimum roster 12"):
        clients2[V].receive(adversarial_roster(server2, ids[:-1]))  # one check-in left out


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
        pt = m.SharePlaintext.from_bytes(aead.open_sealed(ck, clients[c]._boxes[V], aead.associated_data(rid, V, c)))
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
    x_v = [(int(a) - int(b)) % (1 << BITS) for a, b in zip(y_v, mask)]
    assert x_v == inputs[V].tolist()
