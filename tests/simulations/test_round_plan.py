"""One round configuration (``protocols.RoundPlan``, built by ``simulations.aggregators.round_plan``) and one
``aggregators.crypto_round``: the same seeded rounds as the five wrappers it replaces, bit for bit.

The expected digests were recorded from the branch-point code (git rev cf39e55, before the wrappers were
merged), by ``aggregators.crypto_round(IDS, ROWS, bits=16, threshold=..., dropouts=..., neighbours=..., seed=...,
security=...)``, which handed every row to ``crypto_round_lazy`` -> ``crypto_round_on`` ->
``protocols.run_pooled_round``. The sum itself is also checked against an independent oracle: the survivors'
rows added with Python integers mod 2^16."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from protocols import LazyInputs, RoundPlan, run_plan, run_secagg_round
from protocols.pool import InProcessClientPool
from secagg_dp.errors import ParameterError
from simulations import aggregators

BITS = 16
IDS = list(range(3, 15))
ROWS = np.random.default_rng(2024).integers(0, 1 << BITS, size=(len(IDS), 37), dtype=np.uint64)

# (security, neighbours, threshold, dropouts, seed, min_roster) -> (sha256 of the little-endian uint64 aggregate,
# survivors), recorded at cf39e55 (see the module docstring), whose wrappers gave every client the minimum roster
# n - (advertise_keys dropouts), passed here explicitly (the simulator now passes its secagg.min_roster)
RECORDED = [
    (
        ("active", 6, 5, {"advertise_keys": {4}, "masked_input": {9}, "unmasking": {12}}, 11, 11),
        ("b36a225eddb083fa24355d0e3423cb8538223d4ad21748d12108ca953c9f873e", [3, 5, 6, 7, 8, 10, 11, 12, 13, 14]),
    ),
    (
        ("semi-honest", None, 9, {}, 12, 12),
        ("2510b0914aa3395ebe7503a59d3a69cdecf7fcb16823d9cfc76655ee3f9cb76a", IDS),
    ),
]


def _lazy() -> LazyInputs:
    rows = dict(zip(IDS, ROWS, strict=True))
    return LazyInputs(tuple(IDS), rows.__getitem__, ROWS.shape[1])


@pytest.mark.parametrize(("case", "want"), RECORDED)
def test_crypto_round_is_the_five_wrappers_round(case, want):
    security, neighbours, threshold, drops, seed, roster = case
    plan = aggregators.round_plan(
        IDS,
        ROWS.shape[1],
        drops,
        bits=BITS,
        threshold=threshold,
        neighbours=neighbours,
        seed=seed,
        security=security,
        min_roster=roster,
    )
    res = aggregators.crypto_round(_lazy(), plan, drops)
    assert hashlib.sha256(res.aggregate.astype("<u8").tobytes()).hexdigest() == want[0]
    assert sorted(res.survivors) == want[1]
    exact = [sum(int(ROWS[IDS.index(c), j]) for c in res.survivors) % (1 << BITS) for j in range(ROWS.shape[1])]
    assert res.aggregate.tolist() == exact
    # a pool that already holds the inputs (as the Dask executor's): the same round
    pooled = aggregators.crypto_round(InProcessClientPool(dict(zip(IDS, ROWS, strict=True))), plan, drops, IDS)
    assert pooled.aggregate.tolist() == exact and pooled.survivors == res.survivors


def test_round_plan_is_checked_and_run_plan_checks_a_hand_made_plan():
    drops = {"advertise_keys": {4}}
    plan = aggregators.round_plan(IDS, 37, drops, bits=BITS, threshold=5, neighbours=6, seed=1, min_roster=11)
    assert (plan.bits, plan.dim, plan.threshold, plan.neighbours, plan.clients) == (BITS, 37, 5, 6, len(IDS))
    assert plan.min_roster == 11 and plan.seed == 1 and len(plan.round_id) == 16
    assert aggregators.round_plan(IDS, 37, drops, bits=BITS, threshold=5, neighbours=6, seed=1).min_roster == 2
    full = aggregators.round_plan(IDS, 37, {}, bits=BITS, threshold=9, neighbours=len(IDS) - 1, seed=1)
    assert full.neighbours is None  # degree n - 1 is the full graph
    with pytest.raises(ParameterError, match="'threshold'"):  # below floor((k + 1)/2) + 1 = 4 in active mode
        aggregators.round_plan(IDS, 37, {}, bits=BITS, threshold=3, neighbours=6, seed=1)
    with pytest.raises(ParameterError, match="'dropouts"):
        aggregators.round_plan(IDS, 37, {"masked_input": {99}}, bits=BITS, threshold=5, neighbours=6, seed=1)
    bad = dataclasses.replace(plan, threshold=3)  # a RoundPlan made by hand is checked by the round as well
    with pytest.raises(ParameterError, match="'threshold'"):
        run_plan(InProcessClientPool(dict(zip(IDS, ROWS, strict=True))), IDS, bad)
    assert isinstance(plan, RoundPlan)


def test_modulus_bits_is_deprecated_for_bits():
    inputs = dict(zip(IDS, ROWS, strict=True))
    kw = dict(threshold=9, security="semi-honest", seed=3, round_id=bytes(16), workers=1)
    new = run_secagg_round(inputs, bits=BITS, **kw)
    with pytest.warns(DeprecationWarning, match="'modulus_bits' is deprecated"):
        old = run_secagg_round(inputs, modulus_bits=BITS, **kw)
    assert old.aggregate.tolist() == new.aggregate.tolist()
    assert new.aggregate.tolist() == [int(v) % (1 << BITS) for v in ROWS.sum(axis=0, dtype=object)]
    with pytest.raises(ParameterError, match="'bits' and 'modulus_bits'"):
        run_secagg_round(inputs, bits=BITS, modulus_bits=BITS, **kw)
    with pytest.raises(ParameterError, match="'bits' is required"):
        run_secagg_round(inputs, **kw)
