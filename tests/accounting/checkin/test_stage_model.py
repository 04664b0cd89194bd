"""The accountant's dropout model, the protocol's stages and the simulator's dropout stages are one definition.

Tied through the real protocol: a client silenced at each stage of a run of ``run_secagg_round`` is left out of
the sum (with its noise) exactly at the stages of ``secagg_dp.stages.NOISE_LOST_STAGES``, whose count is the
accountant's ``PROTOCOL_DROPOUT_STAGES`` (the exponent N of gamma = p (1 - p')^N).
"""

from __future__ import annotations

import numpy as np
import pytest

from protocols import STAGES, run_secagg_round
from protocols.stages import SERVER_ADVANCE, STAGE_NAMES, ServerStage
from secagg_dp.accounting import PROTOCOL_DROPOUT_STAGES, effective_checkin_rate
from secagg_dp.stages import NOISE_LOST_STAGES, PROTOCOL_STAGES, stages_for
from simulations import aggregators


def test_protocol_runs_the_library_stages_in_order():
    assert STAGES == PROTOCOL_STAGES == tuple(STAGE_NAMES)
    for security in ("active", "semi-honest"):
        order, stage = [], SERVER_ADVANCE[security][ServerStage.IDLE]
        while stage is not ServerStage.DONE:  # the server's deadline transitions visit the stages in this order
            order.append(stage)
            stage = SERVER_ADVANCE[security][stage]
        assert order == [STAGE_NAMES[s] for s in stages_for(security)]


@pytest.mark.parametrize("security", ["active", "semi-honest"])
def test_noise_lost_stages_are_where_the_protocol_drops_the_input(security):
    n, dropped = 8, 5
    inputs = {i: np.full(4, i + 1, dtype=np.uint64) for i in range(n)}
    lost = []
    for stage in stages_for(security):
        res = run_secagg_round(inputs, bits=16, threshold=6, dropouts={stage: {dropped}}, seed=3, security=security)
        want = sum(i + 1 for i in range(n) if i != dropped or dropped in res.survivors)
        assert res.aggregate.tolist() == [want] * 4
        if dropped not in res.survivors:
            lost.append(stage)
    assert tuple(lost) == NOISE_LOST_STAGES
    assert PROTOCOL_DROPOUT_STAGES == len(lost) == 3


def test_accountant_and_simulator_read_the_same_stage_count():
    # gamma = p (1 - p')^N with N the number of noise-losing stages (SCI22 Sec. 3.2 with N stages)
    assert effective_checkin_rate(0.5, 0.3) == pytest.approx(0.5 * 0.7**3, rel=1e-15)
    assert aggregators.STAGES == stages_for("semi-honest")
    assert aggregators.STAGES[: aggregators.INCLUDED_FROM] == NOISE_LOST_STAGES
    # the simulator's empirical inclusion rate matches the accountant's (1 - p')^N: 200 000 clients, p' = 0.3,
    # 0.343 +- 0.0011 (sd); a 6-sd band fails with probability < 1e-8
    stages = aggregators.draw_drop_stages(200_000, 0.3, np.random.default_rng(11))
    rate = float(np.mean(stages >= aggregators.INCLUDED_FROM))
    assert abs(rate - effective_checkin_rate(1.0, 0.3)) < 6 * np.sqrt(0.343 * 0.657 / 200_000)


def test_order_grids_one_name_each():
    # three grids on purpose: the core's (fractional orders near 1), the check-in accountant's (integers, sparse
    # above 256) and the simulator's (the check-in grid cut at 256); the former check-in name is an alias
    from secagg_dp import accounting
    from secagg_dp.accounting import checkin
    from secagg_dp.accounting.checkin.mixture import checkin_orders
    from simulations.privacy import ORDERS

    assert checkin.DEFAULT_ORDERS is checkin.CHECKIN_ORDERS is accounting.CHECKIN_ORDERS
    assert accounting.DEFAULT_ORDERS is not checkin.CHECKIN_ORDERS
    assert np.array_equal(checkin.CHECKIN_ORDERS, checkin_orders(1024))
    assert np.array_equal(ORDERS, np.arange(2, 257)) and np.array_equal(ORDERS, checkin_orders(256))
    assert 1.5 in accounting.DEFAULT_ORDERS and np.all(checkin.CHECKIN_ORDERS == np.round(checkin.CHECKIN_ORDERS))
