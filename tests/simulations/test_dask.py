"""--executor dask on a LocalCluster gives the same results as in-process for the same seeds."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

from simulations.clients import BLOCK, CHUNK
from simulations.executors import DaskExecutor, InProcessExecutor, chunked
from simulations.runner import run_scenario
from tests.simulations.conftest import CountingAccountant, small_config


def test_dask_localcluster_matches_inprocess(tmp_path):
    cfg = small_config(rounds=2, population={"clients": 5000, "checkin": 0.9, "dropout": 0.1})
    local = run_scenario(cfg, tmp_path / "a", executor=InProcessExecutor(), accountant=CountingAccountant())
    with DaskExecutor("", n_workers=2, processes=False) as ex:
        assert ex.parallelism == 2
        dist = run_scenario(cfg, tmp_path / "b", executor=ex, accountant=CountingAccountant())
    strip = lambda doc: [{k: v for k, v in r.items() if k != "seconds"} for r in doc["rounds"]]  # noqa: E731
    assert strip(local) == strip(dist)
    assert local["rounds"][0]["checked_in"] > BLOCK * CHUNK  # more than one chunk, so work really was split


def test_chunked_covers_every_id_once():
    chunks = chunked(list(range(10)), 3)
    assert sum(chunks, []) == list(range(10)) and len(chunks) == 3
    assert chunked([], 4) == []


def test_dask_crypto_mode_and_ideal_sum_match_inprocess():
    from simulations.runner import aggregate_round, plan

    # dropout kept small: the active-mode threshold t > 2n/3 must survive three dropout stages
    cfg = small_config(population={"clients": 30, "checkin": 0.8, "dropout": 0.03}, secagg={"bits": 24})
    p = plan(cfg, 11)
    with DaskExecutor("", n_workers=2, processes=False) as ex:
        for mode in ("ideal", "crypto"):
            local = aggregate_round(cfg, p, 11, 1, None, InProcessExecutor(), mode)
            dist = aggregate_round(cfg, p, 11, 1, None, ex, mode)
            assert local.aggregate is not None and dist.aggregate is not None
            assert local.aggregate.tolist() == dist.aggregate.tolist()
            assert local.truth.tolist() == dist.truth.tolist()
