"""Per-client downlinks built when read (``SecAggServer.advance_deferred``, ``LazyEnvelopes``): a seeded round
gives the same sum, survivors, reports and byte counts as one whose downlinks are built up front (the
transport's list path, taken when any fault rule is set: here one that matches nothing), and the transport
delivers a lazy batch in the order and with the counts of the list it stands for."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import InProcessClientPool, run_pooled_round
from protocols import messages as m
from protocols.transport import Envelope, FaultInjector, InProcessTransport, LazyEnvelopes

BITS, DIM = 20, 7
IDS = list(range(2, 50, 2))


def _round(faults: FaultInjector | None, neighbours: int | None, security: str):  # noqa: ANN202
    rng = np.random.default_rng(11)
    inputs = {c: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for c in IDS}
    t = 5 if neighbours else (17 if security == "active" else 4)
    return run_pooled_round(
        InProcessClientPool(inputs),
        IDS,
        DIM,
        bits=BITS,
        threshold=t,
        neighbours=neighbours,
        security=security,
        dropouts={"masked_input": {4, 10}, "unmasking": {20}},
        seed=5,
        round_id=bytes(range(16)),
        faults=faults,
    )


@pytest.mark.parametrize(("neighbours", "security"), [(8, "active"), (None, "active"), (8, "semi-honest")])
def test_lazy_downlink_round_equals_the_eager_one(neighbours: int | None, security: str) -> None:
    lazy = _round(None, neighbours, security)
    eager = _round(FaultInjector().drop(sender=10**6), neighbours, security)  # a rule forces the list path
    assert np.array_equal(lazy.aggregate, eager.aggregate)
    assert (lazy.survivors, lazy.dropped, lazy.reports) == (eager.survivors, eager.dropped, eager.reports)
    a, b = lazy.communication, eager.communication
    assert a is not None and b is not None and a.stages == b.stages
    for x, y in ((a.clients, b.clients), (a.upload, b.upload), (a.download, b.download)):
        assert np.array_equal(x, y)


def test_transport_delivers_a_lazy_batch_like_its_list_and_meters_unread_entries() -> None:
    recipients = [9, 3, 7, 5, 1]  # ids, not positions: sizes 10 + id make each count checkable by hand
    built: list[int] = []

    def build(i: int) -> bytes:
        built.append(i)
        return bytes([i]) * (10 + recipients[i])  # sizes differ per recipient

    as_list = [Envelope(0, r, bytes([i]) * (10 + r)) for i, r in enumerate(recipients)]
    eager = InProcessTransport(rng=np.random.default_rng(3), keep_log=False)
    lazy = InProcessTransport(rng=np.random.default_rng(3), keep_log=False)
    want = eager.deliver("share_keys:down", as_list)
    got = lazy.deliver("share_keys:down", LazyEnvelopes(0, recipients, build))
    assert not built and len(got) == len(want)  # nothing built before it is read
    assert got[1] == want[1] and got[1] == want[1]  # a second read builds again but is metered once
    assert built and all(i == built[0] for i in built)
    for tr in (eager, lazy):  # one byte up from each, so every recipient counts as a participant
        tr.deliver("share_keys:up", [Envelope(r, m.SERVER, b"x") for r in recipients])
    c, d = lazy.communication(), eager.communication()  # the unread entries are metered here
    assert [got[i] for i in range(len(got))] == want
    assert c.stages == d.stages == ("share_keys",)
    assert c.clients.tolist() == d.clients.tolist() == [1, 3, 5, 7, 9]
    assert c.download[:, 0].tolist() == d.download[:, 0].tolist() == [11, 13, 15, 17, 19]  # 10 + id bytes each
