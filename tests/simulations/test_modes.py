"""Full crypto and the ideal aggregator produce the identical modular sum for the same seeds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from secagg_dp.noise.aggregate import sample_noise_sum
from simulations.clients import blocks_of, noise_rng, run_blocks
from simulations.executors import InProcessExecutor
from simulations.runner import aggregate_both_modes, aggregate_noise_groups, aggregate_round, plan
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


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_ideal_sum_equals_python_int_sum_of_included_vectors(mechanism):
    # independent oracle: Python ints, no uint64 wrap-around involved. The ideal aggregator draws the included
    # clients' noise as one sum (the clients encode without noise): the aggregate is the sum of the included
    # noise-free encodings plus that draw over exactly len(included) clients, from the round's noise stream.
    cfg = small_config(
        population={"clients": 20, "dropout": 0.2},
        secagg={"bits": 62, "threshold_fraction": 0.2, "security": "semi-honest"},
        privacy={"mechanism": mechanism},
    )
    p = plan(cfg, 11)
    ra = aggregate_round(cfg, p, 11, 1, None, InProcessExecutor(), "ideal")
    assert ra.spec.client_noise is False
    ids, rows, _ = run_blocks(ra.spec, blocks_of(ra.ids))
    noise = sample_noise_sum(mechanism, p.sigma_int, len(ra.included), p.padded_dim, rng=noise_rng(11, 1, cfg.rng))
    q = 1 << 62
    want = [
        (sum(int(rows[i, j]) for i, c in enumerate(ids) if c in ra.included) + int(noise[j])) % q
        for j in range(rows.shape[1])
    ]
    assert [int(v) for v in ra.aggregate] == want
    assert 0 < len(ra.included) < len(ra.ids)  # the dropout path was exercised
    # per-client noise (what the crypto mode does) gives a different draw of the same law
    per_client = aggregate_round(cfg, p, 11, 1, None, InProcessExecutor(), "ideal", aggregate_noise=False)
    assert per_client.spec.client_noise is True
    assert not np.array_equal(per_client.aggregate, ra.aggregate)


def test_aggregate_noise_falls_back_to_per_client_draws():
    cfg = small_config(population={"clients": 20})
    p = plan(cfg, 3)
    assert aggregate_noise_groups(cfg, p, 10) == [10]
    tiny = dataclasses.replace(p, sigma_int=0.6)  # TV bound ~0.3 per coordinate: no shortcut
    assert aggregate_noise_groups(cfg, tiny, 10) is None
    assert aggregate_noise_groups(
        dataclasses.replace(cfg, privacy=dataclasses.replace(cfg.privacy, mechanism="skellam")), tiny, 10
    ) == [10]
    logreg = small_config(task={"name": "logreg"}, privacy={"unit": "sample"})
    assert aggregate_noise_groups(logreg, plan(logreg, 3), 10) is None  # the noise feeds the local steps
