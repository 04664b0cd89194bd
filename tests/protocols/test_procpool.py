"""The process pool: a seeded round with its clients in forked workers is the in-process round bit for bit
(aggregate, survivors, dropouts, reports in order, bytes counted), the aggregate is the exact sum of the
survivors' inputs, and a worker's reply in another shard's client's name is refused."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest

from protocols import InProcessClientPool, run_pooled_round, run_secagg_round
from protocols.messages import Kind
from protocols.pool import LazyInputs, own_replies
from protocols.procpool import ProcessClientPool, client_pool
from protocols.transport import Envelope, FaultInjector
from secagg_dp.errors import ParameterError, ProtocolError
from tests.protocols.roundkit import exact_sum

pytestmark = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs the fork start method")

BITS, DIM = 20, 9
IDS = [3 * i + 1 for i in range(24)]


def _inputs() -> dict[int, np.ndarray]:
    rng = np.random.default_rng(4)
    return {c: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for c in IDS}


def _faults() -> FaultInjector:
    # refusals from clients of different shards, so the merged report order is exercised
    return FaultInjector().tamper(Kind.UNMASK_REQUEST, recipient=IDS[2]).tamper(Kind.UNMASK_REQUEST, recipient=IDS[20])


def _same(got, ref) -> None:
    assert got.aggregate.tolist() == ref.aggregate.tolist()
    assert got.survivors == ref.survivors and got.dropped == ref.dropped and got.reports == ref.reports
    a, b = got.communication, ref.communication
    assert a.stages == b.stages and a.clients.tolist() == b.clients.tolist()
    assert a.upload.tolist() == b.upload.tolist() and a.download.tolist() == b.download.tolist()


@pytest.mark.parametrize("security", ["active", "semi-honest"])
@pytest.mark.parametrize("workers", [2, 3])
def test_process_pool_gives_the_sequential_round(security, workers):
    inputs = _inputs()
    drops = {"share_keys": {IDS[4]}, "masked_input": {IDS[9], IDS[17]}, "unmasking": {IDS[13]}}
    if security == "active":
        drops["consistency"] = {IDS[21]}
    kw = dict(bits=BITS, threshold=7, neighbours=12, dropouts=drops, seed=7, round_id=b"p" * 16, security=security)
    ref = run_pooled_round(InProcessClientPool(inputs), IDS, DIM, faults=_faults(), **kw)
    with ProcessClientPool(inputs, workers) as pool:
        got = run_pooled_round(pool, IDS, DIM, faults=_faults(), **kw)
        assert pool.workers == workers and set(pool.cpu) >= {"share_keys", "masked_input", "unmasking"}
    _same(got, ref)
    assert got.survivors == frozenset(IDS) - {IDS[4], IDS[9], IDS[17]}
    assert got.aggregate.tolist() == exact_sum(inputs, got.survivors, BITS)  # the brute-force sum, not the code's
    assert len([r for r in got.reports if "refused a message" in r]) == 2


def test_run_secagg_round_workers_full_graph_and_secaggplus():
    inputs = _inputs()
    for k in (None, 8):
        kw = dict(bits=BITS, threshold=17 if k is None else 5, neighbours=k, seed=3, round_id=b"q" * 16)
        drops = {"masked_input": {IDS[0], IDS[5]}}
        ref = run_secagg_round(inputs, dropouts=drops, workers=1, **kw)
        got = run_secagg_round(inputs, dropouts=drops, workers=2, **kw)
        _same(got, ref)
        assert got.aggregate.tolist() == exact_sum(inputs, frozenset(IDS) - {IDS[0], IDS[5]}, BITS)


def test_client_pool_choice_and_bad_workers():
    inputs = _inputs()
    assert isinstance(client_pool(inputs, 1), InProcessClientPool)
    assert isinstance(client_pool(inputs), InProcessClientPool)  # 24 clients: too few to fork for
    with pytest.raises(ParameterError, match="'workers'"):
        client_pool(inputs, 0)
    with pytest.raises(ParameterError, match="'workers'"):
        run_secagg_round(inputs, bits=BITS, threshold=5, neighbours=8, workers=-1)


def test_a_reply_in_another_shards_name_is_refused():
    inputs = _inputs()
    with ProcessClientPool(inputs, 2) as pool:
        sent = {5: IDS[0], 6: IDS[-1]}  # shard 0 was sent an envelope for IDS[0], shard 1 one for IDS[-1]
        refused: list[str] = []
        replies = [(5, IDS[0], b"ok"), (6, IDS[-1], b"foreign"), (5, IDS[0], b"again"), (7, IDS[1], b"unsent")]
        kept = own_replies("share_keys", 0, {5: sent[5]}, pool._owner, replies, refused)
        assert kept == [(5, IDS[0], b"ok")] and len(refused) == 3
        assert all("may not give; refused" in r for r in refused)


def test_an_envelope_for_nobody_is_dropped():
    inputs = _inputs()
    with ProcessClientPool(inputs, 2) as pool:
        uplink, reports = pool.deliver("advertise_keys", [Envelope(0, 10**6, b"x")])
        assert uplink == [] and reports == []


def test_a_worker_failure_is_raised_in_the_driver():
    with ProcessClientPool(_inputs(), 2) as pool:
        with pytest.raises(ProtocolError, match="unknown pool command"):
            pool._all([("bogus",)] * pool.workers)
        # the workers answered (an error each) and keep serving: the pool still works
        assert pool.deliver("advertise_keys", []) == ([], [])


def _made(cid: int) -> np.ndarray:
    """Client ``cid``'s input, a function of its id alone (so the test can recompute it independently)."""
    return np.random.default_rng([5, cid]).integers(0, 1 << BITS, DIM, dtype=np.uint64)


def test_lazy_process_pool_makes_each_shards_inputs_in_its_worker_once(tmp_path):
    # every call of make, in whichever process makes it, is logged as "pid cid" to a file (appends of short
    # lines are atomic), so the test sees the workers' calls
    log = tmp_path / "calls"

    def make(cid: int) -> np.ndarray:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {cid}\n")
        return _made(cid)

    drops = {"share_keys": {IDS[4]}, "masked_input": {IDS[9], IDS[17]}, "unmasking": {IDS[13]}}
    kw = dict(bits=BITS, threshold=7, neighbours=12, dropouts=drops, seed=7, round_id=b"z" * 16)
    with ProcessClientPool.lazy(reversed(IDS), make, 2) as pool:  # ids in any order
        assert pool.ids == IDS and pool.workers == 2
        assert not log.exists()  # nothing is made before the clients are built
        got = run_pooled_round(pool, IDS, DIM, **kw)
        owner = dict(pool._owner)
    calls = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    assert sorted(c for _, c in calls) == IDS  # every client's input made exactly once
    by_pid: dict[int, list[int]] = {}
    for pid, c in calls:
        by_pid.setdefault(pid, []).append(c)
    assert os.getpid() not in by_pid and len(by_pid) == 2  # made in the two workers, not in the driver
    for made in by_pid.values():  # each worker made its own shard's inputs only, in ascending order
        assert made == sorted(made) and len({owner[c] for c in made}) == 1
    # brute force with Python ints on inputs recomputed here, not taken from the pool
    assert got.survivors == frozenset(IDS) - {IDS[4], IDS[9], IDS[17]}
    want = [sum(int(_made(c)[j]) for c in got.survivors) % (1 << BITS) for j in range(DIM)]
    assert got.aggregate.tolist() == want
    ref = run_pooled_round(InProcessClientPool({c: _made(c) for c in IDS}), IDS, DIM, **kw)
    _same(got, ref)  # the same seeded round as the dict-fed in-process pool


def test_client_pool_takes_lazy_inputs():
    lazy = LazyInputs(IDS, _made)
    assert lazy.ids == tuple(IDS) and len(lazy) == len(IDS)
    assert isinstance(client_pool(lazy), InProcessClientPool)  # 24 clients: too few to fork for
    assert isinstance(client_pool(lazy, 1), InProcessClientPool)
    with client_pool(lazy, 2) as pool:
        assert isinstance(pool, ProcessClientPool) and pool.ids == IDS
    with pytest.raises(ParameterError, match="'make'"):
        LazyInputs(IDS, None)
    with pytest.raises(ParameterError, match="'ids'"):
        LazyInputs((), _made)
    with pytest.raises(ParameterError, match="'ids'"):
        LazyInputs(["a"], _made)
    with pytest.raises(ParameterError, match="'inputs'"):
        ProcessClientPool([1, 2], 2)


@pytest.mark.parametrize("workers", [1, 2])
def test_run_secagg_round_takes_lazy_inputs(workers):
    """run_secagg_round on LazyInputs (dim set): the exact sum of the survivors' inputs (Python ints on inputs
    recomputed here) and the same seeded round as the dict; a bad vector is refused where it is made, naming
    the client."""
    kw = dict(bits=BITS, threshold=5, neighbours=8, seed=3, round_id=bytes(16), workers=workers)
    drops = {"masked_input": {IDS[5], IDS[18]}}
    got = run_secagg_round(LazyInputs(IDS, _made, dim=DIM), dropouts=drops, **kw)
    assert got.survivors == frozenset(IDS) - {IDS[5], IDS[18]}
    want = [sum(int(_made(c)[j]) for c in got.survivors) % (1 << BITS) for j in range(DIM)]
    assert got.aggregate.tolist() == want
    _same(got, run_secagg_round({c: _made(c) for c in IDS}, dropouts=drops, **kw))

    def short(cid: int) -> np.ndarray:
        return _made(cid)[:-1] if cid == IDS[7] else _made(cid)

    with pytest.raises(ParameterError, match=rf"inputs\[{IDS[7]}\].*length {DIM}"):
        run_secagg_round(LazyInputs(IDS, short, dim=DIM), **kw)

    def wide(cid: int) -> np.ndarray:
        x = _made(cid)
        x[0] = 1 << BITS  # not a residue mod 2^BITS
        return x

    with pytest.raises(ParameterError, match=r"inputs\["):
        run_secagg_round(LazyInputs(IDS, wide, dim=DIM), **kw)
    with pytest.raises(ParameterError, match="needs dim"):
        run_secagg_round(LazyInputs(IDS, _made), **kw)
    with pytest.raises(ParameterError, match="'dim'"):
        LazyInputs(IDS, _made, dim=0)
    with pytest.raises(ParameterError, match="'dim'"):  # a length is an integer type
        LazyInputs(IDS, _made, dim=float(DIM))
    assert type(LazyInputs(IDS, _made, dim=np.int64(DIM)).dim) is int
