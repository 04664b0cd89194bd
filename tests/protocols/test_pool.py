"""Client pools: a round whose clients are split over several parts (each run with ``serve``, recombined
with ``merge``) gives what one sequential pool gives, and both give the brute-force sum of the survivors."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import InProcessClientPool, RoundPlan, drive_round, run_pooled_round
from protocols.messages import Kind
from protocols.pki import KeyRegistry
from protocols.pool import merge, serve
from protocols.transport import FaultInjector, InProcessTransport
from secagg_dp.errors import ParameterError, ProtocolError
from tests.protocols.roundkit import exact_sum, make_round

BITS, DIM = 20, 9
IDS = [3 * i + 1 for i in range(24)]


def _inputs() -> dict[int, np.ndarray]:
    rng = np.random.default_rng(4)
    return {c: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for c in IDS}


class SplitPool:
    """Test double of a distributed pool: the clients in three interleaved parts, each its own
    in-process pool with its own registry copy, as on separate workers."""

    def __init__(self, inputs: dict[int, np.ndarray]) -> None:
        ids = sorted(inputs)
        self.parts = [InProcessClientPool({c: inputs[c] for c in ids[r::3]}) for r in range(3)]

    def identities(self, plan: RoundPlan) -> dict[int, bytes]:
        return {c: k for p in self.parts for c, k in p.identities(plan).items()}

    def start(self, plan, registry, silent_from) -> None:
        for p in self.parts:
            p.start(plan, None if registry is None else KeyRegistry(registry.keys), silent_from)

    def deliver(self, stage, envelopes):
        return merge(serve(p.clients, p.silent_from, stage, enumerate(envelopes)) for p in self.parts)


def _faults() -> FaultInjector:
    # refusals from clients of two different parts, so the merged report order is exercised
    return FaultInjector().tamper(Kind.UNMASK_REQUEST, recipient=IDS[2]).tamper(Kind.UNMASK_REQUEST, recipient=IDS[7])


@pytest.mark.parametrize("security", ["active", "semi-honest"])
def test_split_pool_gives_the_sequential_round(security):
    inputs = _inputs()
    drops = {"share_keys": {IDS[4]}, "masked_input": {IDS[9], IDS[10]}, "unmasking": {IDS[13]}}
    if security == "active":
        drops["consistency"] = {IDS[20]}
    kw = dict(bits=BITS, threshold=7, neighbours=12, dropouts=drops, seed=7, round_id=b"p" * 16, security=security)
    ref = run_pooled_round(InProcessClientPool(inputs), IDS, DIM, faults=_faults(), **kw)
    got = run_pooled_round(SplitPool(inputs), IDS, DIM, faults=_faults(), **kw)
    assert got.survivors == ref.survivors == frozenset(IDS) - {IDS[4], IDS[9], IDS[10]}
    assert got.aggregate.tolist() == ref.aggregate.tolist() == exact_sum(inputs, got.survivors, BITS)
    assert got.dropped == ref.dropped == {IDS[9], IDS[10]}
    refused = [r for r in ref.reports if "refused a message" in r]
    assert len(refused) == 2 and got.reports == ref.reports


def test_merge_orders_by_envelope_then_client():
    parts = [[(0, 5, b"a"), (2, 5, "no")], [(0, 2, b"b"), (1, 9, b"c")]]
    uplink, reports = merge(parts)
    assert [(e.sender, e.payload) for e in uplink] == [(2, b"b"), (5, b"a"), (9, b"c")] and reports == ["no"]


def test_drive_round_refuses_silent_from_with_a_pool():
    server, clients, _, _ = make_round()
    pool = InProcessClientPool.of_clients(clients)
    with pytest.raises(ParameterError, match="'silent_from'"):
        drive_round(server, pool, InProcessTransport(), silent_from={1: "share_keys"})


def test_pool_returning_foreign_identities_is_refused():
    class Liar(InProcessClientPool):
        def identities(self, plan):
            keys = super().identities(plan)
            keys[999] = next(iter(keys.values()))
            return keys

    with pytest.raises(ProtocolError, match="identity keys"):
        run_pooled_round(Liar(_inputs()), IDS, DIM, bits=BITS, threshold=5, neighbours=8, seed=1)


def test_run_pooled_round_checks_its_parameters():
    with pytest.raises(ParameterError, match="'dim'"):
        run_pooled_round(InProcessClientPool(_inputs()), IDS, 0, bits=BITS, threshold=5, neighbours=8)
    with pytest.raises(ParameterError, match="'ids'"):
        run_pooled_round(InProcessClientPool(_inputs()), [-1, *IDS], DIM, bits=BITS, threshold=5, neighbours=8)
