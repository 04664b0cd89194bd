"""Test helpers: build a seeded round (server, clients, inputs) in either security mode, step it by hand."""

from __future__ import annotations

import numpy as np

from protocols import messages as m
from protocols.client import SecAggClient
from protocols.graph import index_graph, roster_graph_seed
from protocols.pki import create_identities
from protocols.pool import seeded_sources as _seeded
from protocols.security import ClientPolicy
from protocols.server import SecAggServer
from secagg_dp.crypto import merkle

BITS, DIM = 16, 5


def make_round(
    seed=1,
    t=3,
    ids=tuple(range(1, 8)),
    neighbours=None,
    security="active",
    bits=BITS,
    dim=DIM,
    min_threshold=None,
    min_roster=None,
):
    """A seeded round whose clients hold x_c = c * (0, 1, ..., dim - 1) mod 2^bits.

    ``min_roster=None`` with an active SecAgg+ round: every client expects all of ``ids`` (what
    ``run_pooled_round`` defaults to without dropouts; an active SecAgg+ ``ClientPolicy`` needs one).

    Returns (server, clients, inputs, identities) ; ``identities`` is {} in semi-honest mode."""
    round_id, csrc, ssrc, isrc = _seeded(seed)
    inputs = {c: np.arange(dim, dtype=np.uint64) * c % (1 << bits) for c in ids}
    registry, identities = create_identities(ids, isrc) if security == "active" else (None, {})
    server = SecAggServer(
        bits=bits,
        dim=dim,
        threshold=t,
        neighbours=neighbours,
        security=security,
        registry=registry,
        round_id=round_id,
        source=ssrc,
    )
    if min_roster is None and security == "active" and neighbours is not None:
        min_roster = len(ids)
    policy = ClientPolicy(
        security=security, min_threshold=min_threshold or t, neighbours=neighbours, min_roster=min_roster
    )
    clients = {
        c: SecAggClient(
            c, inputs[c], bits=bits, policy=policy, identity=identities.get(c), registry=registry, source=csrc(c)
        )
        for c in ids
    }
    return server, clients, inputs, identities


def exact_sum(inputs, survivors, bits=BITS):
    """Python-int oracle: the sum of the survivors' inputs mod 2^bits (independent of numpy wrap-around)."""
    dim = len(next(iter(inputs.values())))
    return [sum(int(inputs[c][j]) for c in survivors) % (1 << bits) for j in range(dim)]


def deliver_all(server, clients, outgoing):
    """Hand every (recipient, bytes) to its client(s) and every reply to the server; returns the replies."""
    replies = {}
    for rcpt, b in outgoing:
        for cid in sorted(clients) if rcpt == m.BROADCAST else [rcpt]:
            out = clients[cid].receive(b)
            if out is not None:
                replies[cid] = out
    for cid, out in sorted(replies.items()):
        server.receive(out, sender=cid)
    return replies


def adversarial_roster(server, ids=None, recipient=None, enc=None) -> bytes:
    """The roster a deviating server builds from the check-ins it holds, admitting only ``ids`` (default:
    all) and showing ``enc[u]`` as client u's channel key (default: its own), committed consistently (Merkle
    root, size, graph seed), so that only the checks this is about can refuse it. ``recipient=None``: the
    broadcast of every entry (full graph); a client id: that client's slice (its share holders' entries)."""
    enc = enc or {}
    ids = tuple(sorted(server._keys if ids is None else ids))
    n = len(ids)
    enc_pks = np.stack([np.frombuffer(enc.get(u, server._keys[u][0]), np.uint8) for u in ids])
    mask = np.stack([np.frombuffer(server._keys[u][1], np.uint8) for u in ids])
    sigs = np.stack([np.frombuffer(server._keys[u][2], np.uint8) for u in ids])
    tree = merkle.MerkleTree(m.roster_leaves(ids, enc_pks, mask, sigs))
    if recipient is None:
        at, to = list(range(n)), m.BROADCAST
    else:
        graph = index_graph(n, server.k, roster_graph_seed(server.round_id, n, tree.root))
        i = ids.index(recipient)
        at = list(range(n)) if graph.full else sorted({i, *graph.rows([i])[0].tolist()})
        to = recipient
    proof = tree.multiproof(at) if len(at) < n else []
    return m.KeyRoster(
        server.round_id,
        m.SERVER,
        to,
        n,
        tree.root,
        tuple(at),
        tuple(ids[i] for i in at),
        enc_pks[at],
        mask[at],
        sigs[at],
        np.frombuffer(b"".join(proof), np.uint8).reshape(-1, 32).copy(),
    ).to_bytes()
