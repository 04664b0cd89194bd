"""The survivor count every client verifies (Merkle sum tree), under an active server with add-then-remove
enforcement (Skellam), full graph and SecAgg+.

Before the sum tree a SecAgg+ client saw only its two-hop chunks of the survivor bitmap, checked only
count >= t and took d = N - count from the count the server signed: a server signing count = N with the
honest bitmap had every noise group removed (exact sum, no report). Now the count is the root's count of the
committed tree, recomputed by every client from its own leaves and the siblings' counts; any other count,
a leaf committed with a count other than its popcount, or two statements shown to interleaved halves of
the ring are refused before any share leaves a client. The residual the tree cannot close (dropped clients
with no honest surviving neighbour counted as survivors, SecAgg+ only) is demonstrated and measured last.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from roundkit import deliver_all, make_round

import protocols.round as round_module
from protocols import messages as m
from protocols.graph import two_hop_positions
from protocols.pki import consistency_statement
from protocols.pool import InProcessClientPool, seeded_sources, simulated_noise_master
from protocols.round import run_pooled_round
from protocols.server import SecAggServer, survivor_lists
from protocols.stages import ClientStage, ServerStage
from secagg_dp.crypto import merkle
from secagg_dp.errors import AbortError, ProtocolError
from secagg_dp.noise.add_then_remove import NoiseSpec, client_noise

BITS, DIM, N, SEED = 24, 8, 40, 5
SPEC = NoiseSpec(800.0, 0.1)  # D = floor(0.1 * 40) = 4: the configuration measured for the finding
GRAPHS = [pytest.param(None, 27, id="full"), pytest.param(16, 12, id="secagg+")]  # full: t > 2N/3
DROPPED = {3, 11, 20, 33}  # before their masked input: d = 4 = D, so no group may be removed


def _inputs() -> dict[int, np.ndarray]:
    rng = np.random.default_rng(1)
    return {i: rng.integers(0, 1 << 10, DIM).astype(np.uint64) for i in range(N)}


class _Forging(SecAggServer):
    """An active server that deviates in the consistency round and after it, configured per test:

    ``shown(server, u)`` is the survivor set committed in the list client u receives (default: the honest
    U3); ``tamper(server, msg)`` rewrites that list; ``group(server, count)`` is the noise group asked of a
    client that signed a statement with that count (default: what the count allows). It collects the
    signatures without checking them and sends each client a request consistent with its own statement,
    with the signatures of that statement's signers among its two-hop neighbours: the best a forger can do.
    It records any share a client reveals (``revealed``)."""

    shown = staticmethod(lambda server, u: server._u3)
    tamper = staticmethod(lambda server, msg: msg)
    group = staticmethod(lambda server, count: min(server._noise_sched.removable(N - count), default=0))
    last: _Forging | None = None

    def __init__(self, **kw) -> None:  # noqa: ANN003
        super().__init__(**kw)
        type(self).last = self
        self.revealed: dict[int, object] = {}
        self.sent: dict[int, m.SurvivorList] = {}

    def _close_masked(self):  # noqa: ANN202
        self._need("sent masked inputs", self._masked)
        self._u3 = frozenset(self._masked)
        self._sets: dict[int, frozenset[int]] = {}
        cache: dict[frozenset[int], object] = {}
        out = []
        for u in sorted(self._u3):
            s = frozenset(self.shown(self, u))
            lists = cache.setdefault(s, survivor_lists(self.round_id, self._graph, s))
            msg = self.tamper(self, lists.message(u))
            self._sets[u], self.sent[u] = s, msg
            out.append((u, msg.to_bytes()))
        return out

    def receive(self, data: bytes, *, sender: int) -> None:
        kind = m.peek_kind(data)
        if kind is m.Kind.SURVIVOR_SIGNATURE and self.stage is ServerStage.COLLECT_SIGNATURES:
            self._sigs[sender] = m.decode(data).signature
        elif kind is m.Kind.UNMASK_RESPONSE:
            self.revealed[sender] = m.decode(data)
            self._responses[sender] = ()
        else:
            super().receive(data, sender=sender)

    def _close_signatures(self):  # noqa: ANN202
        self._need("signed the survivor set", self._sigs)
        self._responders = frozenset(self._sigs)
        out = []
        for u in sorted(self._sigs):
            s, msg = self._sets[u], self.sent[u]
            mine = self._holders[u] & self._u2
            near = set(self._graph.ids.tolist())
            if not self._graph.full:
                near = set(self._graph.order[two_hop_positions(self._graph, int(self._graph.ring_pos[u]))].tolist())
            signers = tuple(sorted(v for v in self._sigs if self._sets[v] == s and v in near))
            sigs = np.frombuffer(b"".join(self._sigs[v] for v in signers), np.uint8).reshape(-1, m.SIG_LEN).copy()
            req = m.UnmaskRequest(
                self.round_id,
                m.SERVER,
                u,
                tuple(sorted(mine & s)),
                tuple(sorted(mine - s)),
                signers,
                sigs,
                self.group(self, msg.count),
            )
            out.append((u, req.to_bytes()))
        return out


class _Pool(InProcessClientPool):
    """The in-process pool, keeping the clients' refusal reports (an aborted round returns none)."""

    def deliver(self, stage, envelopes):  # noqa: ANN001, ANN201
        out, refused = super().deliver(stage, envelopes)
        self.refusals = getattr(self, "refusals", []) + refused
        return out, refused


def _run(monkeypatch, neighbours, threshold, *, drops=None, **forge):  # noqa: ANN001, ANN003, ANN202
    for name, fn in forge.items():
        monkeypatch.setattr(_Forging, name, staticmethod(fn))
    monkeypatch.setattr(round_module, "SecAggServer", _Forging)
    inputs = _inputs()
    pool = _Pool(inputs)
    drops = {"masked_input": DROPPED} if drops is None else drops
    rid = seeded_sources(SEED)[0]
    kw = {"bits": BITS, "threshold": threshold, "neighbours": neighbours, "security": "active"}
    try:
        res = run_pooled_round(pool, sorted(inputs), DIM, dropouts=drops, seed=SEED, round_id=rid, noise=SPEC, **kw)
    except AbortError as e:
        return None, e, pool, _Forging.last
    return res, None, pool, _Forging.last


def _unmasking(pool) -> list[str]:  # noqa: ANN001
    """The refusals at the unmasking stage (at least one: the test would pass vacuously otherwise)."""
    out = [r for r in pool.refusals if r.startswith("unmasking")]
    assert out
    return out


def _refused_everything(pool, server, survivors) -> None:
    """No honest client revealed anything: none answered an unmask request, and none is done."""
    assert server.revealed == {}
    assert all(pool.clients[c].stage is not ClientStage.DONE for c in survivors)


def _inflated_leaf(server, msg: m.SurvivorList) -> m.SurvivorList:
    """The honest bitmap under a tree whose leaves claim every position they cover (count N): consistent
    hashes throughout, only the leaves' counts are not their popcounts."""
    caps = [min(256, N - 256 * i) for i in range(-(-N // 256))]
    chunks = m.survivor_chunks(np.isin(server._graph.order, sorted(server._u3)))
    tree = merkle.MerkleSumTree(
        [(c, merkle.sum_leaf_hash(c, row.tobytes())) for c, row in zip(caps, chunks, strict=True)]
    )
    assert tree.count == N
    return dataclasses.replace(msg, root=tree.root, count=tree.count)


@pytest.mark.parametrize(("neighbours", "threshold"), GRAPHS)
@pytest.mark.parametrize(
    ("name", "tamper", "why"),
    [
        (
            "count N",
            lambda s, msg: dataclasses.replace(msg, count=N),
            "states 40 survivors, its committed tree counts 36",
        ),
        ("count > N", lambda s, msg: dataclasses.replace(msg, count=N + 5), "states 45 survivors"),
        ("count 2^32 - 2", lambda s, msg: dataclasses.replace(msg, count=m.MAX_CLIENT_ID + 1), "survivors, its"),
        ("leaf count != popcount", _inflated_leaf, "does not lead to the committed root"),
    ],
)
def test_a_survivor_count_other_than_the_committed_bitmaps_is_refused(
    monkeypatch, neighbours, threshold, name, tamper, why
) -> None:
    """The finding: the server states count = N (or more) with the honest bitmap, so that d = 0 and every group
    is removed (measured before: N = 40, k = 16, t = 12, tolerance 0.1, 4 dropped: exact sum, no report,
    0.911 mu left). Every survivor recomputes the root's count (36 = the popcount of the honest bitmap)
    and refuses to sign; the round aborts with nothing revealed."""
    res, err, pool, server = _run(monkeypatch, neighbours, threshold, tamper=tamper)
    assert res is None and "signed the survivor set" in str(err)
    survivors = set(range(N)) - DROPPED
    assert server._sigs == {}  # nobody signed
    _refused_everything(pool, server, survivors)
    assert all(pool.clients[c].stage is ClientStage.MASKED_INPUT_SENT for c in survivors)
    reports = [r for r in pool.refusals if r.startswith("consistency")]
    assert len(reports) == len(survivors) and all(why in r for r in reports), (name, reports[:1])


@pytest.mark.parametrize(("neighbours", "threshold"), GRAPHS)
def test_equivocated_counts_cannot_both_collect_t_signatures(monkeypatch, neighbours, threshold) -> None:
    """Interleaved halves of the ring are shown two valid trees: the honest U3 (36, no group removable at d = 4)
    and U3 plus the 4 dropped (40: every group removable). Each client signs the one it sees, but no owner has t
    signers on one statement among its share holders (full graph: 18 or 18 + 2 < 27; SecAgg+: about 8 of its 17
    holders < 12), so every honest client refuses to unmask and nothing is revealed."""
    fake = frozenset(range(N))
    res, err, pool, server = _run(
        monkeypatch,
        neighbours,
        threshold,
        shown=lambda s, u: fake if int(s._graph.ring_pos[u]) % 2 else s._u3,
    )
    assert res is None and "answered the unmask request" in str(err)
    survivors = set(range(N)) - DROPPED
    assert set(server._sigs) == survivors  # both statements were signed ...
    assert {msg.count for msg in server.sent.values()} == {36, 40}
    _refused_everything(pool, server, survivors)  # ... but neither collects t signatures for anyone
    assert all("fewer than threshold" in r for r in _unmasking(pool))


@pytest.mark.parametrize(("neighbours", "threshold"), GRAPHS)
def test_dropouts_beyond_the_tolerance_allow_no_removal(monkeypatch, neighbours, threshold) -> None:
    """6 > D = 4 drop before their input: the committed count (34) allows no removal; a server asking for the
    top group anyway is refused by every client (the count is the tree's, so it cannot be talked up)."""
    drops = {"masked_input": {1, 7, 15, 22, 30, 38}}
    res, err, pool, server = _run(
        monkeypatch, neighbours, threshold, drops=drops, group=lambda s, count: s._noise_sched.groups
    )
    assert res is None
    survivors = set(range(N)) - drops["masked_input"]
    assert {msg.count for msg in server.sent.values()} == {34} and SPEC.schedule(N).removable(6) == ()
    _refused_everything(pool, server, survivors)
    assert all("refusing to reveal noise group" in r for r in _unmasking(pool))


# -- the residual: dropped clients with no honest surviving neighbour (SecAgg+) -------------------------------
RES_SPEC = NoiseSpec(800.0, 0.25)  # D = 10, log2 boundaries 0, 1, 2, 4, 8, 10
RES_K, RES_T = 4, 3  # neighbours at ring offsets +-1, +-2


class _Probe(SecAggServer):
    """Stops after the roster: records the ring (a pure function of the seeded check-ins and round id)."""

    order: np.ndarray | None = None

    def _close_keys(self):  # noqa: ANN202
        super()._close_keys()
        type(self).order = self._graph.order.copy()
        raise self._abort("probe")


class _Residual(SecAggServer):
    """Commits to U3 plus ``FAKE`` (dropped clients) in an otherwise honest round."""

    FAKE: frozenset[int] = frozenset()

    def _close_masked(self):  # noqa: ANN202
        out = super()._close_masked()
        lists = survivor_lists(self.round_id, self._graph, self._u3 | self.FAKE)
        self._signed_count = lists.count
        self._statement = consistency_statement(self.round_id, self._roster_statement, lists.root, lists.count)
        return [(u, lists.message(u).to_bytes()) for u, _ in out]


def _residual_round(monkeypatch, server_cls, neighbours, threshold, fake, drops, pool=None):  # noqa: ANN001, ANN202
    monkeypatch.setattr(_Residual, "FAKE", frozenset(fake))
    monkeypatch.setattr(round_module, "SecAggServer", server_cls)
    inputs = _inputs()
    kw = {"bits": BITS, "threshold": threshold, "neighbours": neighbours, "security": "active"}
    pool = _Pool(inputs) if pool is None else pool
    rid = seeded_sources(SEED)[0]
    return run_pooled_round(pool, sorted(inputs), DIM, dropouts=drops, seed=SEED, round_id=rid, noise=RES_SPEC, **kw)


def _oracle(inputs, survivors, d: int, rid: bytes) -> np.ndarray:
    """The survivors' inputs plus the noise each keeps when the groups removable at ``d`` are removed
    (regenerated from the seeded master seeds, summed as Python ints)."""
    sched = RES_SPEC.schedule(N)
    gone = set(sched.removable(d))
    keep = tuple(g for g in range(1, sched.groups + 1) if g not in gone)
    total = [0] * DIM
    for u in sorted(survivors):
        z = client_noise(sched, simulated_noise_master(SEED, rid, u), DIM, keep=keep)
        total = [a + int(x) + int(v) for a, x, v in zip(total, inputs[u], z, strict=True)]
    return np.array([v % (1 << BITS) for v in total], dtype=np.uint64)


def test_residual_dropped_clients_without_honest_surviving_neighbour_pass_as_survivors(monkeypatch) -> None:
    """Known residual, measured (docs/noise-enforcement.md, "What the bound does not cover"): six consecutive
    ring positions drop before sharing keys (d = 6). The two in the middle have all four neighbours (offsets
    +-1, +-2) among the dropped: no honest client holds their shares or masks with them, so nobody can tell
    they did not survive. The server counts them (verified count 36, d = 4): the round finishes, exact, no
    report, and group 4 is removed as well as group 5. The kept noise is what the verified count allows,
    34 mu / 36 = 0.944 mu < mu, and never below level 0 (mu / N per survivor), which is all the coalition
    certificate credits."""
    with pytest.raises(AbortError, match="probe"):
        _residual_round(monkeypatch, _Probe, RES_K, RES_T, (), {})
    order = _Probe.order.tolist()
    run = [order[p] for p in range(10, 16)]  # six consecutive ring positions
    fake = run[2:4]  # neighbours at offsets +-1, +-2 all in the run
    res = _residual_round(monkeypatch, _Residual, RES_K, RES_T, fake, {"share_keys": set(run)})
    sched = RES_SPEC.schedule(N)
    assert res.survivors == frozenset(range(N)) - set(run) and not res.reports
    assert sched.removable(6) == (5,) and res.noise_removed == sched.removable(4) == (4, 5)  # one group too many
    rid = seeded_sources(SEED)[0]
    assert np.array_equal(res.aggregate, _oracle(_inputs(), res.survivors, 4, rid))
    # kept variance of the sum: mu / (N - b*) per survivor with b* = 4, the smallest boundary >= the verified
    # d = 4 (the telescoping sum of docs/noise-enforcement.md), against mu / (N - 8) at the true d = 6
    mu = RES_SPEC.target_variance
    kept = len(res.survivors) * mu / (N - 4)
    assert kept == pytest.approx(34 * mu / 36) and kept < mu  # below the target ...
    assert kept >= len(res.survivors) * mu / N  # ... never below level 0, what the coalition certificate credits
    honest = _oracle(_inputs(), res.survivors, 6, rid)
    assert not np.array_equal(res.aggregate, honest)  # the honest removal would have kept group 4


@pytest.mark.parametrize("where", ["edge of the run", "full graph"])
def test_the_residual_needs_no_honest_neighbour(monkeypatch, where) -> None:
    """The same server counting a dropped client that an honest survivor holds shares for is refused by
    that survivor: on SecAgg+ the run's first client (a ring neighbour of a survivor), on the full graph any
    dropped client (every survivor holds its shares). The round aborts without a sum."""
    with pytest.raises(AbortError, match="probe"):
        _residual_round(monkeypatch, _Probe, RES_K, RES_T, (), {})
    order = _Probe.order.tolist()
    run = [order[p] for p in range(10, 16)]
    neighbours, threshold = (RES_K, RES_T) if where == "edge of the run" else (None, 27)
    fake = run[:1] if where == "edge of the run" else run[2:4]
    pool = _Pool(_inputs())
    with pytest.raises(AbortError):
        _residual_round(monkeypatch, _Residual, neighbours, threshold, fake, {"share_keys": set(run)}, pool)
    refused = {int(r.split("client ")[1].split(" ")[0]) for r in _unmasking(pool) if "never shared keys" in r}
    if where == "edge of the run":  # the honest ring neighbours of the fake survivor (offsets +-1, +-2)
        at = order.index(fake[0])
        want = {order[(at + j) % N] for j in (-2, -1, 1, 2)} - set(run)
    else:
        want = set(range(N)) - set(run)
    assert want and refused == want


def test_sibling_counts_are_checked_against_capacity_and_bound_by_the_root() -> None:
    """Two leaves (ring positions 0-255 and 256-299, n = 300, k = 4), four clients at positions 270-273 drop
    before their input (|U3| = 296). Client V at position 100 sees leaf 0 only; leaf 1 reaches it as a sibling
    (count, hash). A sibling count above the 44 positions under it is refused by capacity alone; a changed
    count under the same hash leads to another root. A tree committing leaf 1 with count 44 over the honest
    bits (count 300) is consistent as far as V can see, so V signs it; W at position 280, who sees leaf 1,
    refuses it. Signatures on that root then come only from clients that do not see leaf 1, so its extra
    survivors are the residual's: positions no signer sees."""
    ids = tuple(range(1, 301))
    server, clients, _, _ = make_round(5, 3, ids, neighbours=4, min_roster=300)
    deliver_all(server, clients, [(m.BROADCAST, server.open_round())])
    deliver_all(server, clients, server.advance())
    order = server._graph.order.tolist()
    drop = set(order[270:274])
    deliver_all(server, clients, [(r, b) for r, b in server.advance() if r not in drop])
    server.advance()
    lists = survivor_lists(server.round_id, server._graph, server._u3)
    v, w = order[100], order[280]
    honest = lists.message(v)
    assert honest.chunk_indices == (0,) and honest.proof_counts == (40,) and lists.count == 296
    assert lists.message(w).chunk_indices == (1,)
    bad = [
        (dataclasses.replace(honest, proof_counts=(45,), count=301), "more than the 44 units under it"),
        (dataclasses.replace(honest, proof_counts=(44,), count=300), "does not lead to the committed root"),
    ]
    for msg, why in bad:
        with pytest.raises(ProtocolError, match=why):
            clients[v].receive(msg.to_bytes())
        assert clients[v].stage is ClientStage.MASKED_INPUT_SENT
    chunks = lists.chunks
    tree = merkle.MerkleSumTree([m.survivor_leaf(chunks[0]), (44, merkle.sum_leaf_hash(44, chunks[1].tobytes()))])
    assert tree.count == 300

    def forged(u: int) -> m.SurvivorList:
        msg = lists.message(u)
        proof = tree.multiproof(list(msg.chunk_indices))
        return dataclasses.replace(
            msg,
            root=tree.root,
            count=tree.count,
            proof=np.frombuffer(b"".join(h for _, h in proof), np.uint8).reshape(-1, 32).copy(),
            proof_counts=tuple(c for c, _ in proof),
        )

    assert m.decode(clients[v].receive(forged(v).to_bytes())).KIND is m.Kind.SURVIVOR_SIGNATURE
    assert clients[v]._signed_count == 300  # V cannot tell: 44 survivors fit under leaf 1
    with pytest.raises(ProtocolError, match="does not lead to the committed root"):
        clients[w].receive(forged(w).to_bytes())  # W recomputes leaf 1 from its bits: popcount 40
