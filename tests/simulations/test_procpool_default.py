"""The simulator's crypto mode (``simulations.aggregators.crypto_round``) takes the default client pool of
``protocols.procpool``: forked workers give the one-process round bit for bit and the exact sum."""

from __future__ import annotations

import multiprocessing as mp
import sys

import pytest

from tests.protocols.roundkit import exact_sum
from tests.protocols.test_procpool import BITS, IDS, _inputs, _same
from tests.simulations.conftest import force_forking

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or "fork" not in mp.get_all_start_methods(),
    reason="the default pool forks on Linux only",
)


def test_simulator_crypto_round_forks_and_matches_one_process(monkeypatch):
    # made to fork for this small round (4 clients per worker, 2 cores)
    from protocols import LazyInputs
    from simulations import aggregators

    inputs = _inputs()
    ids = sorted(inputs)
    drops = {"masked_input": {IDS[3]}}
    plan = aggregators.round_plan(ids, len(inputs[ids[0]]), drops, bits=BITS, threshold=5, neighbours=8, seed=11)
    lazy = LazyInputs(tuple(ids), inputs.__getitem__)
    ref = aggregators.crypto_round(lazy, plan, drops)  # 24 clients: in this process
    forks = force_forking(monkeypatch, 4)
    got = aggregators.crypto_round(lazy, plan, drops)
    assert forks == [2]
    _same(got, ref)
    assert got.aggregate.tolist() == exact_sum(inputs, frozenset(IDS) - {IDS[3]}, BITS)
