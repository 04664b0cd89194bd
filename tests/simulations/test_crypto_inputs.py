"""The simulator's crypto round without Dask makes each client's input when its client is built, one block of
participants at a time (``simulations.clients.BlockInputs``): the aggregate is the exact sum of the included
clients' encoded rows (recomputed here from ``run_blocks`` over all participants, summed with Python ints),
the round equals the one fed every row at once (a dict of every participant's row, the earlier path), and no
more than one block of rows is alive at any time."""

from __future__ import annotations

import multiprocessing as mp
import sys

import numpy as np
import pytest

import simulations.clients as sc
from simulations import aggregators
from simulations.clients import BLOCK, BlockInputs, blocks_of, run_blocks
from simulations.executors import InProcessExecutor
from simulations.runner import aggregate_round, plan, run_scenario
from tests.simulations.conftest import CountingAccountant, force_forking, small_config

BITS = 24


def _cfg(clients: int = 400, rounds: int = 1):
    return small_config(
        mode="crypto",
        rounds=rounds,
        population={"clients": clients, "checkin": 0.8, "dropout": 0.02},
        secagg={"bits": BITS, "neighbours": 8, "threshold_fraction": 0.5, "security": "semi-honest"},
        task={"name": "mean", "dim": 12},
    )


def _brute_force(ra) -> list[int]:
    """The included clients' rows among all participants' (``run_blocks`` over every block, as the earlier
    path encoded them), summed with Python ints mod 2^bits."""
    ids, rows, _ = run_blocks(ra.spec, blocks_of(ra.ids))
    keep = np.isin(ids, ra.included)
    return [int(v) % (1 << BITS) for v in rows[keep].sum(axis=0, dtype=object)]


def _concatenated(ra):
    """The round as the earlier path ran it: every participant's row in one array, handed over at once."""
    from protocols import LazyInputs
    from simulations.clients import PURPOSE_CRYPTO
    from simulations.runner import _round_int

    ids, rows, _ = run_blocks(ra.spec, blocks_of(ra.ids))
    cfg = _cfg()
    drops = aggregators.dropout_sets(ra.ids, ra.drop_stages)
    plan = aggregators.round_plan(
        ids.tolist(),
        rows.shape[1],
        drops,
        bits=BITS,
        threshold=ra.threshold,
        neighbours=cfg.secagg.neighbours,
        seed=_round_int(cfg.seed, ra.spec.round, PURPOSE_CRYPTO),
        security=cfg.secagg.security,
    )
    by_id = dict(zip(ids.tolist(), rows, strict=True))
    return aggregators.crypto_round(LazyInputs(tuple(by_id), by_id.__getitem__), plan, drops)


def test_crypto_round_encodes_block_by_block_and_is_exact(monkeypatch):
    live = {"held": 0, "calls": 0}
    real, call = sc.encode_block_packed, BlockInputs.__call__

    def spy(spec, block):  # every block encoding of the round goes through here, one block per call
        out = real(spec, block)
        live["calls"] += 1
        assert len(out) == len(block[1]) <= BLOCK
        return out

    def handing(self, cid):  # the inputs hold one block's packed rows at most, none once all are handed out
        row = call(self, cid)
        live["held"] = max(live["held"], len(self._left))
        return row

    monkeypatch.setattr(sc, "encode_block_packed", spy)
    monkeypatch.setattr(BlockInputs, "__call__", handing)
    monkeypatch.setattr(sc, "run_blocks", None)  # the whole-block encoder (ideal mode's) is not used
    cfg = _cfg()
    p = plan(cfg, 11)
    ra = aggregate_round(cfg, p, 11, 1, None, InProcessExecutor(), "crypto")
    monkeypatch.undo()
    assert len(ra.ids) > 2 * BLOCK and 0 < len(ra.ids) - len(ra.included)  # several blocks, dropouts
    assert ra.aggregate is not None
    assert live["calls"] == len(blocks_of(ra.ids))  # each block encoded once
    assert 0 < live["held"] < BLOCK  # never more than one block's rows held
    assert ra.aggregate.tolist() == _brute_force(ra)
    # the truth is the plain float sum of the included clients' task rows, one client at a time
    want = sum(ra.spec.task.client_vectors(None, np.array([c]), 1, 11)[0] for c in ra.included)
    assert np.allclose(ra.truth, want, rtol=1e-12, atol=1e-9)
    old = _concatenated(ra)  # the same seeded round as the earlier path, message for message
    assert ra.aggregate.tolist() == old.aggregate.tolist()
    assert ra.communication.upload.tolist() == old.communication.upload.tolist()
    assert ra.communication.download.tolist() == old.communication.download.tolist()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or "fork" not in mp.get_all_start_methods(),
    reason="the default pool forks on Linux only",
)
def test_crypto_round_in_forked_workers_is_exact(monkeypatch):
    # made to fork for this small round: each worker encodes its own shard's blocks (a block cut by the shard
    # boundary is encoded in both workers, each handing out its own clients' rows)
    forks = force_forking(monkeypatch, 16)
    cfg = _cfg(clients=300)
    p = plan(cfg, 11)
    ra = aggregate_round(cfg, p, 11, 1, None, InProcessExecutor(), "crypto")
    monkeypatch.undo()
    assert forks == [2] and (len(ra.ids) // 2) % BLOCK != 0  # the shard boundary falls inside a block
    assert ra.aggregate is not None and ra.aggregate.tolist() == _brute_force(ra)


def test_scenario_results_equal_the_concatenating_path(monkeypatch, tmp_path):
    # the whole results document (encode, protocol, ledger, decode, metrics) of a seeded crypto scenario is
    # that of the earlier path, which built every participant's row and handed them over at once
    cfg = _cfg(clients=120, rounds=2)
    new = run_scenario(cfg, tmp_path / "new", executor=InProcessExecutor(), accountant=CountingAccountant())

    real = aggregators.crypto_round

    def concatenating(clients, plan, dropouts):  # the earlier path: every row at once, in one dict
        rows = {c: clients.make(c) for c in clients.ids}
        return real(type(clients)(tuple(rows), rows.__getitem__), plan, dropouts)

    monkeypatch.setattr(aggregators, "crypto_round", concatenating)
    old = run_scenario(cfg, tmp_path / "old", executor=InProcessExecutor(), accountant=CountingAccountant())
    strip = lambda doc: [{k: v for k, v in r.items() if k != "seconds"} for r in doc["rounds"]]  # noqa: E731
    assert strip(new) == strip(old)
    assert all(not r["aborted"] and r["metrics"] for r in new["rounds"])


def test_block_inputs_rows_are_run_blocks_rows():
    cfg = _cfg()
    p = plan(cfg, 11)
    ra = aggregate_round(cfg, p, 11, 1, None, InProcessExecutor(), "ideal")
    ids, rows, _ = run_blocks(ra.spec, blocks_of(ra.ids))
    inputs = BlockInputs(ra.spec, ra.ids)
    assert inputs.ids == ids.tolist()
    order = list(range(len(ids)))
    order = order[BLOCK:] + order[:BLOCK]  # out of order, and one row asked for twice
    for i in order + [3]:
        assert inputs(int(ids[i])).tolist() == rows[i].tolist()
    with pytest.raises(sc.ParameterError, match="'cid'"):
        inputs(int(ids.max()) + 1)
    with pytest.raises(sc.ParameterError, match="'ids'"):
        BlockInputs(ra.spec, ids[::-1])
    # one shard's blocks (as a Dask shard loads them): the same rows for its clients, by their global block
    shard = blocks_of(ra.ids)[1:]
    got_ids, part = sc.block_inputs(ra.spec, shard)
    assert got_ids.tolist() == ids[BLOCK:].tolist()
    assert [part(int(c)).tolist() for c in got_ids] == rows[BLOCK:].tolist()
    with pytest.raises(sc.ParameterError, match="'cid'"):
        part(int(ids[0]))  # a client of another shard
    with pytest.raises(sc.ParameterError, match="'blocks'"):
        BlockInputs.of_blocks(ra.spec, blocks_of(ra.ids, np.ones(len(ra.ids), dtype=bool)))
