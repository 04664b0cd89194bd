"""The crypto mode's inputs are encoded a few rows at a time (``simulations.clients.encode_block_packed``), never
as a block of rows x d, and are the rows of the whole-block encoder bit for bit.

Oracles: ``run_blocks`` (the block encoder the ideal mode runs: noise for the whole block in one call, then
``ZqCodec.encode`` of the whole block), ``ZqCodec.quantize`` of the whole batch, ``sample_discrete_gaussian`` of
the whole size, and numpy's ``sum(axis=0)`` of a block's rows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import simulations.clients as sc
from protocols import wire
from secagg_dp.noise.discrete_gaussian import iter_discrete_gaussian, sample_discrete_gaussian
from secagg_dp.quantize import ZqCodec
from simulations.executors import InProcessExecutor
from simulations.runner import aggregate_round, make_task, plan
from tests.simulations.conftest import small_config

BITS = 24


def _spec(mechanism: str, rng: str, beta: float, dim: int, **sections):
    cfg = small_config(
        mode="crypto",
        rounds=1,
        rng=rng,
        population={"clients": 170, "checkin": 0.9, "dropout": 0.0},
        secagg={"bits": BITS, "neighbours": 8, "threshold_fraction": 0.5, "security": "semi-honest"},
        privacy={"mechanism": mechanism, "beta": beta, **sections.get("privacy", {})},
        task=sections.get("task", {"name": "mean", "dim": dim}),
    )
    task = make_task(cfg)
    p = plan(cfg, 11, task)
    model = task.init_model(11)
    return aggregate_round(cfg, p, 11, 1, model, InProcessExecutor(), "ideal", task, aggregate_noise=False)


def _unpacked(got: dict[int, bytes], d: int) -> list[list[int]]:
    return [wire.unpack_residues(got[c], d, BITS).tolist() for c in got]


@pytest.mark.parametrize(
    ("mechanism", "rng", "beta", "dim", "values"),
    [
        ("ddg", "aes-counter", 0.6065306597126334, 12, 1 << 20),  # the whole block in one batch
        ("skellam", "pcg64", 0.6065306597126334, 300, 1000),  # two rows per batch
        ("ddg", "pcg64", 0.999, 300, 1),  # one row per batch, and rows redrawn after the last batch
        ("skellam", "aes-counter", 0.999, 40, 100),
    ],
)
def test_packed_block_rows_are_run_blocks_rows(monkeypatch, mechanism, rng, beta, dim, values):
    ra = _spec(mechanism, rng, beta, dim)
    monkeypatch.setattr(sc, "ROW_VALUES", values)
    for block in sc.blocks_of(ra.ids):
        ids, rows, _ = sc.run_blocks(ra.spec, [block])
        got = sc.encode_block_packed(ra.spec, block)
        assert list(got) == ids.tolist()
        assert _unpacked(got, rows.shape[1]) == rows.tolist()


def test_packed_block_rows_with_enforced_noise_and_at_the_sample_level():
    ra = _spec("skellam", "aes-counter", 0.6065306597126334, 20)
    # add-then-remove applied by the encoder (as the ideal mode does): each client's seeded groups
    spec = dataclasses.replace(ra.spec, enforcement=(4.0e4, 150, 0.1), kept_groups=(1,), noise_seed=5)
    block = sc.blocks_of(ra.ids)[0]
    ids, rows, _ = sc.run_blocks(spec, [block])
    assert _unpacked(sc.encode_block_packed(spec, block), rows.shape[1]) == rows.tolist()
    sample = _spec("ddg", "pcg64", 0.6065306597126334, 0, task={"name": "logreg"}, privacy={"unit": "sample"})
    block = sc.blocks_of(sample.ids)[1]
    ids, rows, _ = sc.run_blocks(sample.spec, [block])
    assert _unpacked(sc.encode_block_packed(sample.spec, block), rows.shape[1]) == rows.tolist()
    with pytest.raises(sc.ParameterError, match="'block'"):
        sc.encode_block_packed(sample.spec, sc.blocks_of(sample.ids, np.ones(len(sample.ids), dtype=bool))[0])


def test_quantize_stream_is_quantize_of_the_whole_batch():
    codec = ZqCodec(300, 16, 1.0, 40.0, rotation_seed=3, beta=0.999)  # rejects often: redraws happen
    x = np.random.default_rng(1).standard_normal((23, 300))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    g1, g2 = (np.random.Generator(np.random.PCG64(5)) for _ in range(2))
    want = codec.quantize(x, rng=g1)
    got = np.zeros_like(want)
    order = []
    for i, row in codec.quantize_stream((x[lo : lo + 4] for lo in range(0, 23, 4)), rng=g2):
        got[i] = row
        order.append(i)
    assert sorted(order) == list(range(23)) and order != sorted(order)  # each row once; some redrawn last
    assert np.array_equal(got, want)
    assert g1.random() == g2.random()  # the generator left in the same state


def test_iter_discrete_gaussian_is_the_sampler_in_pieces():
    g1, g2 = (np.random.Generator(np.random.PCG64(7)) for _ in range(2))
    want = sample_discrete_gaussian(30.0, 2_500_001, rng=g1)
    pieces = list(iter_discrete_gaussian(30.0, 2_500_001, rng=g2))
    assert len(pieces) > 1 and max(p.size for p in pieces) <= 1 << 20
    assert np.array_equal(np.concatenate(pieces), want)
    assert g1.random() == g2.random()


def test_client_truth_in_batches_is_the_block_sum(monkeypatch):
    ra = _spec("ddg", "aes-counter", 0.6065306597126334, 50)
    ids = ra.included
    want = np.zeros(50)
    for lo in range(0, len(ids), sc.BLOCK):  # the block sums, as the earlier code added them
        want += ra.spec.task.client_vectors(None, ids[lo : lo + sc.BLOCK], 1, 11).sum(axis=0)
    monkeypatch.setattr(sc, "ROW_VALUES", 120)  # two rows per batch
    got = sc.client_truth(ra.spec, ids)
    assert got is not None and got.tobytes() == want.tobytes()
