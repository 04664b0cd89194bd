"""Add-then-remove noise in the protocol: exact sums after removal under dropouts at every stage (full graph
and SecAgg+, both security modes), and an active server asking for more noise groups than the dropouts allow,
refused by every honest client before it reveals anything."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import protocols.round as round_module
from protocols import messages as m
from protocols.pool import InProcessClientPool, seeded_sources, simulated_noise_master
from protocols.round import run_pooled_round, run_secagg_round
from protocols.server import SecAggServer
from protocols.stages import ClientStage
from secagg_dp import zq
from secagg_dp.errors import AbortError
from secagg_dp.noise.add_then_remove import NoiseSpec, client_noise

BITS, DIM, N = 24, 40, 12
SPEC = NoiseSpec(800.0, 0.25)  # D = floor(0.25 N)


def _inputs(n: int = N) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(3)
    return {i: rng.integers(0, 1 << 10, DIM).astype(np.uint64) for i in range(n)}


def _expected(inputs, survivors, roster: int, seed: int, round_id: bytes) -> np.ndarray:
    """Oracle: sum over the survivors of x_u plus the noise each keeps after removal at d = N - |survivors|
    (level 0 and the groups not removable), regenerated from the seeded master seeds."""
    sched = SPEC.schedule(roster)
    gone = set(sched.removable(roster - len(survivors)))
    keep = tuple(g for g in range(1, sched.groups + 1) if g not in gone)
    total = 0 * np.zeros(DIM, dtype=object)
    for u in sorted(survivors):
        z = client_noise(sched, simulated_noise_master(seed, round_id, u), DIM, keep=keep)
        total = total + inputs[u].astype(object) + z.astype(object)  # Python integers: an independent sum
    return np.array([int(v) % (1 << BITS) for v in total], dtype=np.uint64)


CASES = [
    ("semi-honest", None, 4, {"masked_input": {3}}),
    ("semi-honest", None, 4, {"advertise_keys": {0}, "share_keys": {2}, "masked_input": {3}, "unmasking": {5}}),
    ("active", None, 9, {"masked_input": {3}, "unmasking": {5}}),
    ("active", None, 9, {"share_keys": {1}, "masked_input": {3}, "consistency": {6}}),
    ("active", 8, 5, {"share_keys": {2}, "masked_input": {3}, "unmasking": {7}}),
    ("semi-honest", 6, 4, {"advertise_keys": {1}, "masked_input": {3, 4}}),
    ("semi-honest", None, 4, {"masked_input": {1, 2, 3, 4}}),  # d = 4 > D = 3: nothing removed (degraded)
]


@pytest.mark.parametrize(("security", "neighbours", "threshold", "drops"), CASES)
def test_exact_sum_after_removal(security, neighbours, threshold, drops) -> None:
    inputs, seed = _inputs(), 7
    rid = seeded_sources(seed)[0]
    res = run_secagg_round(
        inputs,
        bits=BITS,
        threshold=threshold,
        dropouts=drops,
        neighbours=neighbours,
        security=security,
        seed=seed,
        round_id=rid,
        noise=SPEC,
    )
    roster = N - len(drops.get("advertise_keys", ()))
    sched = SPEC.schedule(roster)
    d = roster - len(res.survivors)
    removable = sched.removable(d)
    assert res.noise_removed == removable
    assert (d >= sched.max_dropouts) == (removable == ())  # at d = D every level stays
    assert np.array_equal(res.aggregate, _expected(inputs, res.survivors, roster, seed, rid))


def test_without_noise_the_round_is_unchanged() -> None:
    inputs = _inputs()
    a = run_secagg_round(inputs, bits=BITS, threshold=9, seed=3, round_id=seeded_sources(3)[0])
    assert a.noise_removed == () and np.array_equal(a.aggregate, zq.sum_mod(list(inputs.values()), BITS))


class _GreedyServer(SecAggServer):
    """An active server that asks every client for group ``GREEDY`` and above (more than d allows)."""

    GREEDY = 1

    def _unmask_requests(self, responders, sigs):  # noqa: ANN001, ANN202
        out = super()._unmask_requests(responders, sigs)
        self._noise_group = self.GREEDY
        return [(u, dataclasses.replace(m.decode(b), noise_group=self.GREEDY).to_bytes()) for u, b in out]


@pytest.mark.parametrize("greedy", [1, 2])
@pytest.mark.parametrize(
    ("security", "neighbours", "threshold"), [("active", None, 9), ("active", 8, 5), ("semi-honest", None, 4)]
)
def test_server_asking_for_more_noise_groups_is_refused_by_every_honest_client(
    monkeypatch, security, neighbours, threshold, greedy
) -> None:
    """d = 2 roster members drop before their input, so groups 1 and 2 (levels 1 and 2, part of the target
    noise) must stay; the server asks for one of them anyway. Every client that receives the request refuses
    it (the round aborts with no response, so no share of any noise seed, self-mask seed or key leaves a
    client). Semi-honest SecAgg+ is not listed: there a client sees only its neighbourhood and trusts d."""
    monkeypatch.setattr(_GreedyServer, "GREEDY", greedy)
    monkeypatch.setattr(round_module, "SecAggServer", _GreedyServer)
    inputs = _inputs()
    pool = InProcessClientPool(inputs)
    drops = {"masked_input": {3, 4}}
    with pytest.raises(AbortError, match="answered the unmask request"):
        run_pooled_round(
            pool,
            sorted(inputs),
            DIM,
            bits=BITS,
            threshold=threshold,
            dropouts=drops,
            neighbours=neighbours,
            security=security,
            seed=5,
            round_id=seeded_sources(5)[0],
            noise=SPEC,
        )
    asked = [c for cid, c in pool.clients.items() if cid not in drops["masked_input"]]
    assert asked and all(c.stage is not ClientStage.DONE for c in asked)
    # what an honest server asks at d = 2 (boundaries 0, 1, 2, 3): group 3 only; groups 1 and 2 hold the target
    assert SPEC.schedule(N).boundaries == (0, 1, 2, 3) and SPEC.schedule(N).removable(2) == (3,)


def test_decoded_noise_of_a_crypto_round_has_the_target_variance() -> None:
    """Zero inputs, d = 2 dropouts before the masked input (D = 3, boundaries 0..3: no grouping excess): the
    unmasked sum, lifted to (-q/2, q/2], is the noise left after removal, Sk(mu) per coordinate. Its sample
    variance over m coordinates against mu: for Skellam every even cumulant equals the variance, so
    Var(s^2) ~ (mu + 2 mu^2) / m; |z| <= 4.8916 = norm.isf(0.5e-6), false-failure rate 1e-6 (normal law)."""
    m_coords, mu = 20_000, 800.0
    inputs = {i: np.zeros(m_coords, dtype=np.uint64) for i in range(N)}
    res = run_secagg_round(
        inputs,
        bits=BITS,
        threshold=4,
        dropouts={"masked_input": {3, 5}},
        security="semi-honest",
        seed=11,
        round_id=seeded_sources(11)[0],
        noise=SPEC,
    )
    assert res.noise_removed == (3,) and SPEC.schedule(N).excess_variance(2) == 0.0
    noise = zq.centered(res.aggregate, BITS).astype(np.float64)
    z = (float(np.var(noise, ddof=1)) - mu) / np.sqrt((mu + 2 * mu * mu) / m_coords)
    assert abs(z) <= 4.8916, z


class _InflatingServer(SecAggServer):
    """An active server that counts the clients that dropped before sharing keys as survivors in the signed
    survivor set (they have no masks, so the sum would still come out), shrinking d by their number."""

    def _close_masked(self):  # noqa: ANN202
        from protocols.pki import consistency_statement
        from protocols.server import survivor_lists

        self._u3 = frozenset(self._masked) | (self._u1 - self._u2)
        self._requests = {}
        lists = survivor_lists(self.round_id, self._graph, self._u3)
        self._signed_count = lists.count  # the noise group asked follows the committed count
        self._statement = consistency_statement(self.round_id, self._roster_statement, lists.root, lists.count)
        return [(u, lists.message(u).to_bytes()) for u in sorted(self._masked)]


@pytest.mark.parametrize(("neighbours", "threshold"), [(None, 9), (8, 5)])
def test_survivor_set_counting_clients_that_never_shared_is_refused(monkeypatch, neighbours, threshold) -> None:
    """Client 2 drops at share_keys and 3 at masked_input: d = 2 allows group 3 only. The server counts 2 as a
    survivor (d = 1 would allow groups 2 and 3) and asks for group 2. Every honest client that holds a share
    for client 2's neighbourhood sees a survivor that never sent it a box and refuses (on the full graph: all)."""
    monkeypatch.setattr(round_module, "SecAggServer", _InflatingServer)
    inputs = _inputs()
    pool = InProcessClientPool(inputs)
    with pytest.raises(AbortError):
        run_pooled_round(
            pool,
            sorted(inputs),
            DIM,
            bits=BITS,
            threshold=threshold,
            dropouts={"share_keys": {2}, "masked_input": {3}},
            neighbours=neighbours,
            security="active",
            seed=5,
            round_id=seeded_sources(5)[0],
            noise=SPEC,
        )
    refused = {cid for cid, c in pool.clients.items() if cid not in (2, 3) and c.stage is not ClientStage.DONE}
    if neighbours is None:
        assert refused == set(inputs) - {2, 3}
    else:  # at least client 2's share holders (its ring neighbours) refuse
        holders = {c for c in inputs if c not in (2, 3) and 2 in pool.clients[c]._index_of}
        assert holders and holders <= refused
