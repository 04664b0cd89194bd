"""The simulator's crypto mode (``simulations.aggregators.crypto_round``) takes the default client pool of
``protocols.procpool``: forked workers give the one-process round bit for bit and the exact sum."""

from __future__ import annotations

import multiprocessing as mp
import sys

import numpy as np
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
    from simulations import aggregators

    inputs = _inputs()
    ids = sorted(inputs)
    rows = np.stack([inputs[c] for c in ids])
    kw = dict(bits=BITS, threshold=5, dropouts={"masked_input": {IDS[3]}}, neighbours=8, seed=11)
    ref = aggregators.crypto_round(ids, rows, **kw)  # 24 clients: in this process
    forks = force_forking(monkeypatch, 4)
    got = aggregators.crypto_round(ids, rows, **kw)
    assert forks == [2]
    _same(got, ref)
    assert got.aggregate.tolist() == exact_sum(inputs, frozenset(IDS) - {IDS[3]}, BITS)
