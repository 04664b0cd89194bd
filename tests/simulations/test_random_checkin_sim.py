"""Random check-ins in the simulator (``population.participation = "random-checkin"``): the config keys, the
participation draw against its law, both aggregation modes, results.json, and the accountant.

Statistical tests run at a fixed seed (deterministic); each uses significance level ALPHA = 1e-4, the rate at
which a correct sampler would fail it for a seed picked at random (so changing a seed fails a correct
implementation with probability <= 1e-4 per check). Oracles: the law itself (scipy's exact binomial test and
chi-square against the Bin / uniform-subset probabilities written here from the definition), and the library's
RandomCheckinAccountant recomputed from an event built here from the plan's numbers, not the simulator's."""

from __future__ import annotations

import itertools
import json
import math
import sys

import numpy as np
import pytest
from scipy import stats

from secagg_dp.errors import ConfigError
from simulations.config import build_config
from simulations.results import check_results
from simulations.runner import _epoch_draw, draw_slots, plan, run_scenario, select_participants
from tests.simulations.conftest import small_config

ALPHA = 1e-4


def rc_config(**over):
    pop = {"participation": "random-checkin", "epoch_rounds": 3, "slots": 2, **over.pop("population", {})}
    return small_config(population=pop, **over)


# -- config ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pop", "key", "needle"),
    [
        ({"participation": "sometimes"}, "population.participation", "'checkin', 'random-checkin'"),
        ({"participation": "random-checkin", "epoch_rounds": 0}, "population.epoch_rounds", "in [1, 1000000]"),
        ({"participation": "random-checkin", "epoch_rounds": 2.0}, "population.epoch_rounds", "integer"),
        ({"participation": "random-checkin", "epoch_rounds": 3, "slots": 4}, "population.slots", "in [1, 3], not 4"),
        ({"participation": "random-checkin", "epoch_rounds": 3, "slots": 0}, "population.slots", ">= 1, not 0"),
        ({"epoch_rounds": 4}, "population.epoch_rounds", "random-checkin' only"),
        ({"slots": 2}, "population.slots", "random-checkin' only"),
        ({"participation": "random-checkin", "sampling": "fixed"}, "population.sampling", "'checkin'"),
    ],
)
def test_keys_are_validated_naming_the_key(pop, key, needle):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as err:
        small_config(population=pop)
    assert needle in str(err.value)


def test_random_checkin_refuses_what_its_certificate_does_not_cover():
    with pytest.raises(ConfigError, match="population.participation"):
        rc_config(privacy={"mechanism": "skellam", "noise_enforcement": "add-then-remove"})
    with pytest.raises(ConfigError, match="privacy.method"):
        from simulations.privacy import make_accountant

        cfg = rc_config(privacy={"method": "window"})
        make_accountant(cfg, plan(cfg, 0))


def test_defaults_keep_the_per_round_coin():
    pop = build_config({}).population
    assert (pop.participation, pop.epoch_rounds, pop.slots) == ("checkin", 1, 1)
    assert pop.round_rate == pop.checkin
    # random check-ins: a client is in a given round with probability p b / m (expected check-ins n p b / m)
    rc = rc_config(population={"clients": 30, "checkin": 0.6, "epoch_rounds": 4, "slots": 3}).population
    assert rc.expected_checkins == pytest.approx(30 * 0.6 * 3 / 4)


# -- the participation draw against its law ------------------------------------------------------------------
def _chisquare_p(observed: np.ndarray, expected: np.ndarray) -> float:
    """Chi-square goodness of fit, bins with expectation < 5 pooled into their neighbour (Cochran's rule)."""
    obs, exp = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 5:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e:
        obs[-1] += acc_o
        exp[-1] += acc_e
    return float(stats.chisquare(obs, exp).pvalue)


def test_each_client_takes_part_in_an_epoch_with_probability_p_independently():
    n, p, m, b, epochs = 1500, 0.3, 5, 2, 20
    counts = np.zeros(n, dtype=np.int64)  # epochs each client took part in
    sizes = []
    for e in range(epochs):
        ids, _ = _epoch_draw(12345, e, n, p, m, b)
        assert np.all(np.diff(ids) > 0) and ids.min() >= 0 and ids.max() < n  # sorted distinct client ids
        counts[ids] += 1
        sizes.append(len(ids))
    # total participations ~ Bin(n E, p): exact two-sided binomial test
    assert stats.binomtest(int(counts.sum()), n * epochs, p).pvalue > ALPHA
    # per-client count over the epochs ~ Bin(E, p) iid across clients (independent coins, fresh every epoch)
    observed = np.bincount(counts, minlength=epochs + 1).astype(float)
    expected = n * stats.binom.pmf(np.arange(epochs + 1), epochs, p)
    assert _chisquare_p(observed, expected) > ALPHA


@pytest.mark.parametrize(("m", "b"), [(6, 3), (5, 1), (4, 4)])
def test_slots_are_distinct_and_a_uniform_b_subset(m, b):
    rng = np.random.default_rng(7)
    count = 6000
    slots = draw_slots(rng, count, m, b)
    assert slots.shape == (count, b) and slots.min() >= 0 and slots.max() < m
    assert all(len(set(row)) == b for row in slots.tolist())  # b distinct rounds
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(m), b))}
    tally = np.bincount([subsets[tuple(sorted(row))] for row in slots.tolist()], minlength=len(subsets))
    expected = np.full(len(subsets), count / math.comb(m, b))
    if len(subsets) == 1:
        assert tally[0] == count
    else:
        assert stats.chisquare(tally, expected).pvalue > ALPHA


def test_rounds_of_an_epoch_hold_each_participant_exactly_b_times():
    """Through select_participants: per epoch no client is in more than b rounds, every participant is in exactly
    b of them (none lost), and the per-round count is Bin(n, p b / m) (exact binomial test over the rounds)."""
    n, p, m, b, rounds = 400, 0.4, 4, 3, 12  # 3 full epochs
    cfg = rc_config(rounds=rounds, population={"clients": n, "checkin": p, "epoch_rounds": m, "slots": b}, secagg={})
    total = 0
    for e in range(rounds // m):
        per_client = np.zeros(n, dtype=np.int64)
        for j in range(m):
            ids = select_participants(cfg, 99, e * m + j + 1)
            assert np.all(np.diff(ids) > 0)
            per_client[ids] += 1
            total += len(ids)
        assert per_client.max() <= b
        assert set(np.unique(per_client)) <= {0, b}
        assert np.array_equal(np.flatnonzero(per_client), _epoch_draw(99, e, n, p, m, b)[0])
    # the per-round marginal p b / m over n clients and 12 rounds (sums of dependent rounds: a check of the mean)
    assert stats.binomtest(total, n * rounds, p * b / m).pvalue > ALPHA


def test_partial_last_epoch_is_a_prefix_of_a_full_one():
    cfg5 = rc_config(rounds=5, population={"epoch_rounds": 3, "slots": 1})
    cfg6 = rc_config(rounds=6, population={"epoch_rounds": 3, "slots": 1})
    for r in (4, 5):
        assert np.array_equal(select_participants(cfg5, 3, r), select_participants(cfg6, 3, r))


# -- both modes, results.json, the accountant ---------------------------------------------------------------
@pytest.mark.parametrize("mode", ["ideal", "crypto"])
def test_both_modes_run_and_results_record_the_scheme(tmp_path, mode):
    cfg = rc_config(mode=mode, rounds=4, population={"epoch_rounds": 3, "slots": 2, "dropout": 0.05})
    doc = run_scenario(cfg, tmp_path)
    check_results(doc)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    pop = on_disk["config"]["population"]
    assert (pop["participation"], pop["epoch_rounds"], pop["slots"]) == ("random-checkin", 3, 2)
    assert doc["status"] == "complete" and len(doc["rounds"]) == 4
    for rec in doc["rounds"]:  # the per-round participant counts, as the draw gave them
        assert rec["checked_in"] == len(select_participants(cfg, doc["seeds"]["root"], rec["round"]))
    priv = on_disk["privacy"]
    assert "random_checkin" in priv["accountant"]
    assert priv["epochs"] == 2 and priv["ledger"]["events"] == 2  # 4 rounds = a full epoch and a partial one
    eps = [r["epsilon"] for r in doc["rounds"]]
    assert eps[0] == eps[1] == eps[2] < eps[3]  # the epoch is charged at its first round


@pytest.mark.parametrize("b", [1, 2])
def test_certified_epsilon_is_the_librarys_random_checkin_accountant(tmp_path, b):
    """b = 1: the analyst's curve amplified by the epoch coin (the surviving participants are a uniform subset
    given the counts); b = 2: per-round drops break that, so the analyst is charged the server's curve."""
    from secagg_dp.accounting.checkin.bases import DDGSum
    from secagg_dp.accounting.checkin.coalition import Coalition
    from secagg_dp.accounting.checkin.random_checkin import RandomCheckinAccountant, RandomCheckinEpoch
    from simulations.privacy import ORDERS

    n, p, drop, m = 16, 0.75, 0.1, 3
    cfg = rc_config(rounds=5, population={"dropout": drop, "epoch_rounds": m, "slots": b})
    doc = run_scenario(cfg, tmp_path)
    d = doc["derived"]
    # the event from the plan's numbers: DDG of per-client std sigma_int, replace-one = twice the codec's bounds
    mech = DDGSum(d["sigma_int"], d["padded_dim"], 2 * d["l2_sensitivity"], 2 * d["l1_sensitivity"])
    gamma = p * (1 - drop) ** 3  # checked in, then survived advertise_keys, share_keys, masked_input
    event = RandomCheckinEpoch(mech, n, gamma, m, b, "replace-one")
    epochs = 2  # ceil(5 / 3): the partial epoch is charged in full
    priv = doc["privacy"]
    coalition = Coalition(colluders=0, min_sum=priv["coalition"]["min_sum"])
    for observer, got in (
        ("analyst", doc["summary"]["epsilon"]),
        ("server", priv["server"]["epsilon"]),
        ("coalition", priv["coalition"]["epsilon"]),
    ):
        acc = RandomCheckinAccountant(
            "replace-one",
            observer=observer,
            method="rdp",
            coalition=coalition if observer == "coalition" else None,
            orders=ORDERS,
            amplified=b == 1,
        )
        want = acc.compose(event, epochs).get_epsilon(1e-5)
        assert got == pytest.approx(want, rel=1e-12), observer
    assert doc["summary"]["epsilon"] <= priv["server"]["epsilon"]
    if b == 1:  # the epoch coin (gamma < 1) is credited to the analyst
        assert doc["summary"]["epsilon"] < priv["server"]["epsilon"]
    else:
        assert doc["summary"]["epsilon"] == priv["server"]["epsilon"]
    # not the per-round coin's accountant: that one would certify a different number for these parameters
    from simulations.privacy import SimAccountant

    per_round = SimAccountant(small_config(rounds=5, population={"dropout": drop}), plan(cfg, 11), None)
    assert per_round.planned_epsilon != pytest.approx(doc["summary"]["epsilon"], rel=1e-3)


def test_refuses_to_certify_without_the_library_part(monkeypatch):
    from simulations.privacy import make_accountant

    cfg = rc_config()
    p = plan(cfg, 0)
    monkeypatch.setitem(sys.modules, "secagg_dp.accounting.checkin.random_checkin", None)  # import fails
    with pytest.raises(ConfigError, match="random-checkin accounting not available"):
        make_accountant(cfg, p)


def test_budget_refuses_the_epoch_before_its_first_round(tmp_path):
    """An epsilon_budget between one and two epochs' certificates: the run stops at round m + 1 (the second
    epoch's first round is refused before it runs), and the ledger holds exactly one epoch."""
    from secagg_dp.accounting.core.ledger import PrivacyLedger

    base = rc_config(rounds=6, population={"epoch_rounds": 3, "slots": 1})
    probe = run_scenario(base, tmp_path / "probe")["rounds"]
    one, two = probe[0]["epsilon"], probe[3]["epsilon"]
    assert one < two
    cfg = rc_config(rounds=6, population={"epoch_rounds": 3, "slots": 1}, privacy={"epsilon_budget": (one + two) / 2})
    doc = run_scenario(cfg, tmp_path / "run")
    assert doc["status"] == "budget_exhausted" and len(doc["rounds"]) == 3
    assert doc["privacy"]["refused"]["round"] == 4
    led = PrivacyLedger(path=tmp_path / "run" / "ledger.sqlite", read_only=True)
    try:
        assert [(type(ev).__name__, count) for ev, count in led.events] == [("RandomCheckinEpoch", 1)]
        assert led.outcomes[0] is not None and led.outcomes[0][0] == "released"
    finally:
        led.close()
