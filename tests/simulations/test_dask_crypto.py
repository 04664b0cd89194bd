"""Crypto mode on Dask: clients on two worker processes, server on the driver, same round as in-process.

Oracles: the in-process pool on the same seed and round id (every client in this process, the reference
order), and the brute-force modular sum of the survivors' inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("distributed")

from protocols import InProcessClientPool, run_pooled_round  # noqa: E402
from protocols.messages import Kind  # noqa: E402
from protocols.transport import FaultInjector  # noqa: E402
from secagg_dp.errors import AbortError, ParameterError  # noqa: E402
from simulations.clients import blocks_of, run_blocks  # noqa: E402
from simulations.crypto_pool import ClientShard, given_inputs  # noqa: E402
from simulations.executors import DaskExecutor, InProcessExecutor  # noqa: E402
from tests.simulations.conftest import CountingAccountant, small_config  # noqa: E402

BITS, DIM = 24, 30
IDS = [5 * i + 2 for i in range(40)]


@pytest.fixture(scope="module")
def cluster():
    with DaskExecutor("", n_workers=2, processes=True) as ex:
        yield ex


def _inputs(seed: int = 1) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for c in IDS}


def _loads(inputs: dict[int, np.ndarray], cut: int) -> list:
    ids = sorted(inputs)
    return [(given_inputs, (part, np.stack([inputs[c] for c in part]))) for part in (ids[:cut], ids[cut:])]


def _brute_force(inputs: dict[int, np.ndarray], survivors) -> list[int]:
    total = [0] * DIM
    for c in survivors:
        total = [(a + int(b)) % (1 << BITS) for a, b in zip(total, inputs[c], strict=True)]
    return total


@pytest.mark.slow  # over ~3 s under load: CI only, not the quick loop
@pytest.mark.parametrize("security", ["active", "semi-honest"])
def test_dask_pool_round_equals_inprocess_and_brute_force(cluster, security):
    inputs = _inputs()
    drops = {
        "advertise_keys": {IDS[0]},
        "share_keys": {IDS[5], IDS[30]},
        "masked_input": {IDS[8], IDS[21]},
        "unmasking": {IDS[12], IDS[37]},
    }
    if security == "active":
        drops["consistency"] = {IDS[25]}
    # one tampered unmask request to a client of each shard: both refuse, and their reports must come back
    # in the in-process order
    faults = lambda: (  # noqa: E731
        FaultInjector().tamper(Kind.UNMASK_REQUEST, recipient=IDS[3]).tamper(Kind.UNMASK_REQUEST, recipient=IDS[33])
    )
    kw = dict(bits=BITS, threshold=6, neighbours=10, dropouts=drops, seed=3, round_id=b"e" * 16, security=security)
    ref = run_pooled_round(InProcessClientPool(inputs), IDS, DIM, faults=faults(), **kw)
    with cluster.client_pool(_loads(inputs, cut=17)) as pool:
        assert pool.ids == IDS
        got = run_pooled_round(pool, IDS, DIM, faults=faults(), **kw)
    gone = drops["advertise_keys"] | drops["share_keys"] | drops["masked_input"]
    assert got.survivors == ref.survivors == frozenset(IDS) - gone
    assert got.dropped == ref.dropped and got.dropped >= drops["masked_input"]
    assert got.aggregate.tolist() == ref.aggregate.tolist() == _brute_force(inputs, got.survivors)
    assert got.reports == ref.reports
    refused = [r for r in got.reports if "refused a message" in r]
    assert any(f"client {IDS[3]} " in r for r in refused) and any(f"client {IDS[33]} " in r for r in refused)


def test_dask_pool_round_aborts_like_inprocess(cluster):
    inputs = _inputs(2)
    # every neighbour but a few of client IDS[0] falls silent before masking: too few share holders left
    kw = dict(
        bits=BITS,
        threshold=6,
        neighbours=10,
        seed=5,
        round_id=b"a" * 16,
        dropouts={"masked_input": set(IDS[1:36])},
    )
    with pytest.raises(AbortError) as ref:
        run_pooled_round(InProcessClientPool(inputs), IDS, DIM, **kw)
    with cluster.client_pool(_loads(inputs, cut=20)) as pool, pytest.raises(AbortError) as got:
        run_pooled_round(pool, IDS, DIM, **kw)
    assert str(got.value) == str(ref.value)


@pytest.mark.slow  # over ~3 s under load: CI only, not the quick loop
def test_crypto_round_on_dask_executor_equals_inprocess(cluster):
    cfg = small_config(
        mode="crypto",
        population={"clients": 400, "checkin": 0.9, "dropout": 0.02},
        secagg={"bits": 24, "neighbours": 12},
        task={"name": "mean", "dim": 24},
    )
    from simulations.runner import aggregate_round, plan

    p = plan(cfg, 11)
    local = aggregate_round(cfg, p, 11, 1, None, InProcessExecutor(), "crypto")
    dist = aggregate_round(cfg, p, 11, 1, None, cluster, "crypto")
    assert local.aggregate is not None and len(blocks_of(local.ids)) > 1  # more than one block per shard
    assert dist.included.tolist() == local.included.tolist() and len(local.included) < len(local.ids)
    assert dist.aggregate.tolist() == local.aggregate.tolist()
    ids, rows, _ = run_blocks(local.spec, blocks_of(local.ids))  # brute force: sum the included rows
    keep = np.isin(ids, local.included)
    assert dist.aggregate.tolist() == [int(v) % (1 << 24) for v in rows[keep].sum(axis=0, dtype=object)]


def test_shard_rejects_a_loader_with_missing_rows():
    with pytest.raises(ParameterError, match="'load'"):
        ClientShard(given_inputs, ([1, 2, 3], np.zeros((2, 4), dtype=np.uint64)))


def test_pool_rejects_a_client_in_two_shards(cluster):
    row = np.zeros((1, 4), dtype=np.uint64)
    with pytest.raises(ParameterError, match="two shards"):
        cluster.client_pool([(given_inputs, ([7], row)), (given_inputs, ([7], row))])


@pytest.mark.slow  # over ~3 s under load: CI only, not the quick loop
def test_crypto_scenario_on_dask_writes_the_inprocess_rounds(cluster, tmp_path):
    # end to end (encode, protocol, ledger, decode, metrics): the results documents' rounds are equal
    from simulations.runner import run_scenario

    cfg = small_config(
        mode="crypto",
        rounds=2,
        population={"clients": 120, "checkin": 0.9, "dropout": 0.02},
        secagg={"bits": 24, "neighbours": 10},
        task={"name": "mean", "dim": 16},
    )
    local = run_scenario(cfg, tmp_path / "a", executor=InProcessExecutor(), accountant=CountingAccountant())
    dist = run_scenario(cfg, tmp_path / "b", executor=cluster, accountant=CountingAccountant())
    strip = lambda doc: [{k: v for k, v in r.items() if k != "seconds"} for r in doc["rounds"]]  # noqa: E731
    assert strip(local) == strip(dist)
    assert all(not r["aborted"] and r["metrics"] for r in local["rounds"])


class _Done:
    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value


class _StubShard:
    """A shard (as the driver sees a Dask actor) that answers with the given replies whatever it is sent."""

    def __init__(self, replies, keys=None) -> None:
        self.replies, self.keys = replies, keys or {}

    def serve(self, stage, envelopes):
        self.sent = envelopes
        return _Done(self.replies(envelopes))

    def identities(self, plan):
        return _Done(self.keys)


def _stub_pool(shards, owner):
    from simulations.crypto_pool import DaskClientPool

    pool = DaskClientPool.__new__(DaskClientPool)  # no cluster: the driver-side checks only
    pool._shards, pool._owner = shards, owner
    return pool


def test_a_worker_cannot_reply_in_another_shards_clients_name():
    from protocols.messages import BROADCAST, SERVER
    from protocols.transport import Envelope

    owner = {1: 0, 2: 0, 3: 1, 4: 1}
    # shard 0 answers for its client 1, and also forges replies for client 3 (shard 1's) and for client 2 on an
    # envelope addressed to client 1; shard 1 answers honestly for its clients
    evil = _StubShard(lambda env: [(0, 1, b"mine"), (0, 3, b"forged"), (1, 2, b"not addressed to 2")])
    honest = _StubShard(
        lambda env: [(pos, c, b"ok-%d" % c) for pos, e in env for c in (3, 4) if e.recipient in (c, BROADCAST)]
    )
    pool = _stub_pool([evil, honest], owner)
    envs = [Envelope(SERVER, BROADCAST, b"x"), Envelope(SERVER, 1, b"y")]
    uplink, reports = pool.deliver("share_keys", envs)
    assert [(e.sender, e.payload) for e in uplink] == [(1, b"mine"), (3, b"ok-3"), (4, b"ok-4")]
    assert len(reports) == 2 and all("shard 0" in r and "refused" in r for r in reports)
    assert "client 3" in reports[0] and "client 2" in reports[1]


def test_a_worker_cannot_register_identity_keys_for_another_shard():
    from secagg_dp.errors import ProtocolError

    pool = _stub_pool([_StubShard(None, {1: b"k" * 32, 3: b"e" * 32}), _StubShard(None, {3: b"k" * 32})], {1: 0, 3: 1})
    with pytest.raises(ProtocolError, match="shard 0 returned identity keys for clients outside it: \\[3\\]"):
        pool.identities(None)
