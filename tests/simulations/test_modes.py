"""Full crypto and the ideal aggregator produce the identical modular sum for the same seeds."""

from __future__ import annotations

import numpy as np
import pytest

from simulations.clients import blocks_of, run_blocks
from simulations.executors import InProcessExecutor
from simulations.runner import aggregate_both_modes, aggregate_round, plan
from tests.simulations.conftest import small_config


# Heavy dropout (15% per stage) is beyond what the active threshold t > 2n/3 tolerates, so those rows run
# the semi-honest protocol; the active rows use light dropout.
@pytest.mark.parametrize(
    ("bits", "dropout", "mechanism", "task", "security"),
    [
        (16, 0.0, "ddg", "mean", "active"),
        (20, 0.03, "skellam", "mean", "active"),
        (20, 0.15, "skellam", "mean", "semi-honest"),
        (62, 0.15, "ddg", "mean", "semi-honest"),
        (24, 0.1, "ddg", "logreg", "semi-honest"),
    ],
)
def test_identical_modular_sums_in_both_modes(bits, dropout, mechanism, task, security):
    task_cfg = {"name": "mean", "dim": 24} if task == "mean" else {"name": "logreg", "local_steps": 2}
    cfg = small_config(
        population={"clients": 14, "checkin": 0.8, "dropout": dropout},
        secagg={"bits": bits, "threshold_fraction": 0.3, "security": security},
        privacy={"mechanism": mechanism},
        task=task_cfg,
    )
    for r in (1, 2):
        ideal, crypto = aggregate_both_modes(cfg, round_=r)
        assert ideal is not None and crypto is not None
        assert ideal.dtype == crypto.dtype == np.uint64
        assert np.array_equal(ideal, crypto)


def test_ideal_sum_equals_python_int_sum_of_included_vectors():
    # independent oracle: Python ints, no uint64 wrap-around involved
    cfg = small_config(
        population={"clients": 20, "dropout": 0.2},
        secagg={"bits": 62, "threshold_fraction": 0.2, "security": "semi-honest"},
    )
    p = plan(cfg, 11)
    ra = aggregate_round(cfg, p, 11, 1, None, InProcessExecutor(), "ideal")
    ids, rows, _ = run_blocks(ra.spec, blocks_of(ra.ids))
    q = 1 << 62
    want = [sum(int(rows[i, j]) for i, c in enumerate(ids) if c in ra.included) % q for j in range(rows.shape[1])]
    assert [int(v) for v in ra.aggregate] == want
    assert 0 < len(ra.included) < len(ra.ids)  # the dropout path was exercised
