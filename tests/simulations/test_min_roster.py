"""``secagg.min_roster``: the smallest roster every active simulated client accepts, in both modes, and the
coalition's smallest sum m that follows from it."""

from __future__ import annotations

import numpy as np
import pytest

from secagg_dp.errors import AbortError, ConfigError, ProtocolError
from simulations import aggregators
from simulations.config import MIN_ROSTER_REFUSAL, build_config, load_config
from simulations.runner import run_scenario
from tests.simulations.conftest import small_config

# --- the key --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("1", "an integer >= 2, not 1"),
        ("0", "an integer >= 2, not 0"),
        ("2.0", "an integer >= 2, not 2.0"),  # TOML 2.0 is a float, not a count of clients
        ("true", "not True"),
        ('"big"', "an integer >= 2 or \"auto\", not 'big'"),
        ("61", "must be <= population.clients = 60"),  # default.toml: n = 60
    ],
)
def test_min_roster_is_validated_naming_the_key(value, needle):
    with pytest.raises(ConfigError, match="secagg.min_roster") as err:
        build_config({}, [f"secagg.min_roster={value}"])
    assert needle in str(err.value)


def test_min_roster_defaults_to_auto_and_takes_an_integer():
    assert load_config(None).secagg.min_roster == "auto"
    cfg = load_config(None, ["secagg.min_roster=25"])
    assert cfg.secagg.min_roster == cfg.min_roster == 25
    assert build_config({"secagg": {"min_roster": 60}}).min_roster == 60  # the whole population is allowed


def _auto_by_scipy(trials: int, q: float) -> int:
    """The largest N with P(R < N) <= 1e-3, R ~ Bin(trials, q), by scipy's Binomial cdf (at least 2)."""
    from scipy.stats import binom

    best = 0
    for size in range(trials + 1):
        if binom.cdf(size - 1, trials, q) <= MIN_ROSTER_REFUSAL:
            best = size
    return max(2, best)


@pytest.mark.parametrize(
    ("clients", "checkin", "dropout"),
    [
        (60, 0.5, 0.05),
        (12, 0.5, 0.05),
        (16, 0.75, 0.0),
        (1000, 0.1, 0.3),
        (200, 0.25, 0.0),
        (50, 1.0, 0.0),
        (5, 0.9, 0.5),
    ],
)
def test_auto_is_the_largest_roster_refused_with_probability_at_most_1e3(clients, checkin, dropout):
    from scipy.stats import binom

    cfg = build_config({"population": {"clients": clients, "checkin": checkin, "dropout": dropout}})
    q = checkin * (1 - dropout)  # a client is in the roster iff it checked in and did not drop at advertise_keys
    got = cfg.min_roster
    assert got == _auto_by_scipy(clients, q)
    if got > 2:  # the floor refuses an honest round at most at the stated rate, and one more would exceed it
        assert binom.cdf(got - 1, clients, q) <= MIN_ROSTER_REFUSAL < binom.cdf(got, clients, q)


def test_auto_under_fixed_size_sampling_is_the_sample():
    cfg = small_config(population={"sampling": "fixed"})  # round(0.75 * 16) = 12 clients, no dropout
    assert cfg.min_roster == 12


def test_the_default_run_records_min_roster_and_the_coalition_uses_it(tmp_path):
    from simulations.privacy import coalition_min_sum

    cfg = load_config(None, ["rounds=1", "mode=ideal", "task.dim=8"])
    doc = run_scenario(cfg, tmp_path)
    assert (
        doc["derived"]["min_roster"] == 17 == cfg.min_roster
    )  # Bin(60, 0.475): P(R < 17) = 7.8e-4, P(R < 18) = 1.9e-3
    coal = doc["privacy"]["coalition"]
    assert coal["min_sum"] == 12 == coalition_min_sum(cfg)[0]  # t(17) = floor(34 / 3) + 1
    assert "secagg.min_roster = 17" in coal["min_sum_rule"]


# --- the coalition's m follows min_roster ------------------------------------------------------------------------


@pytest.mark.parametrize("floor", [2, 5, 9, 17, 30, 45, 60])
@pytest.mark.parametrize("secagg", [{"threshold_fraction": 0.2}, {"threshold": 21}, {"threshold_fraction": 0.9}])
def test_coalition_m_is_the_smallest_threshold_over_rosters_from_min_roster(floor, secagg):
    """Brute force over every roster N = min_roster..n: the smallest t(N) among rounds that can finish."""
    from simulations.privacy import coalition_min_sum

    cfg = build_config({"secagg": {**secagg, "min_roster": floor}})
    finishing = [
        cfg.secagg.threshold_for(size)
        for size in range(floor, cfg.population.clients + 1)
        if cfg.secagg.threshold_for(size) <= size
    ]
    m, rule = coalition_min_sum(cfg)
    assert m == min(finishing) and rule.startswith(f"{m}: ")


def test_coalition_m_grows_with_min_roster_and_the_certificate_shrinks():
    from simulations.privacy import make_accountant
    from simulations.runner import plan

    def coalition(floor: int) -> dict:
        cfg = load_config(None, ["mode=ideal", "task.dim=8", f"secagg.min_roster={floor}"])
        acct = make_accountant(cfg, plan(cfg, 0), None)
        try:
            return acct.describe()
        finally:
            acct.close()

    low, high = coalition(2), coalition(30)
    assert (low["coalition"]["min_sum"], high["coalition"]["min_sum"]) == (2, 21)
    assert low["server"]["planned_epsilon"] == high["server"]["planned_epsilon"]  # the server view ignores it
    assert low["planned_epsilon"] == high["planned_epsilon"]  # and so does the analyst's
    assert (
        low["coalition"]["planned_epsilon"] > high["coalition"]["planned_epsilon"] >= high["server"]["planned_epsilon"]
    )


# --- both modes refuse a roster below it, alike ------------------------------------------------------------------


def test_abort_reason_names_the_roster_floor_after_the_threshold():
    stage = aggregators.ROSTER_STAGE
    assert stage == "advertise_keys"
    # 10 checked in, 3 drop at advertise_keys: a roster of 7
    assert aggregators.abort_reason(10, {stage: 3}, 2, 8) == (
        "a roster of fewer than secagg.min_roster = 8 clients after stage advertise_keys"
    )
    assert aggregators.abort_reason(10, {stage: 3}, 2, 7) is None
    assert aggregators.abort_reason(10, {stage: 3}, 2, None) is None  # semi-honest: no floor
    # the threshold is checked first (the client's order): a roster below both gives the threshold's reason
    assert (
        aggregators.abort_reason(10, {stage: 3}, 8, 9)
        == "fewer than the threshold t clients left after stage advertise_keys"
    )
    assert aggregators.abort_reason(5, {}, 6, 9) == "fewer than the threshold t clients checked in"


def _refusing_config(mode: str, security: str = "active"):
    # n = 16, p = 0.75, p' = 0.1: min_roster = 12 refuses some of these seeded rounds' rosters
    return small_config(
        mode=mode,
        rounds=6,
        seed=3,
        population={"dropout": 0.1},
        secagg={"min_roster": 12, "security": security},
        task={"name": "mean", "dim": 4},
    )


def test_ideal_and_crypto_modes_refuse_the_same_rounds_for_the_same_reason(tmp_path):
    ideal = run_scenario(_refusing_config("ideal"), tmp_path / "ideal")
    crypto = run_scenario(_refusing_config("crypto"), tmp_path / "crypto")
    reason = "a roster of fewer than secagg.min_roster = 12 clients after stage advertise_keys"
    s_ideal, s_crypto = ideal["summary"], crypto["summary"]
    assert s_ideal["abort_reasons"].get(reason, 0) >= 1  # the seed gives at least one refused round
    assert s_ideal["aborted_rounds"] < 6  # and at least one accepted one
    assert s_ideal["abort_reasons"] == s_crypto["abort_reasons"]
    assert [r["aborted"] for r in ideal["rounds"]] == [r["aborted"] for r in crypto["rounds"]]
    for r in ideal["rounds"]:  # every refused round's roster (checked in less advertise_keys drops) is below 12
        roster = r["checked_in"] - r["dropped"].get("advertise_keys", 0)
        assert r["aborted"] == (roster < 12 or r["checked_in"] - sum(r["dropped"].values()) < r["threshold"])


def test_semi_honest_clients_check_no_roster_floor(tmp_path):
    doc = run_scenario(_refusing_config("ideal", "semi-honest"), tmp_path)
    assert doc["derived"]["min_roster"] == 12
    assert not any("min_roster" in reason for reason in doc["summary"]["abort_reasons"])


def test_crypto_clients_refuse_a_roster_below_their_min_roster():
    """Through the simulator's crypto round (the real protocol): 10 clients check in, 3 drop at advertise_keys,
    so the honest server's roster has 7; clients whose min_roster is 8 refuse it, with 7 they accept it."""
    ids = list(range(10))
    vectors = np.arange(40, dtype=np.uint64).reshape(10, 4) % 16
    from protocols import LazyInputs

    drops = {"advertise_keys": {7, 8, 9}}
    rows = dict(zip(ids, vectors, strict=True))

    def crypto_round(min_roster: int):  # the round's plan (aggregators.round_plan), run by crypto_round
        plan = aggregators.round_plan(
            ids, 4, drops, bits=16, threshold=7, neighbours=None, seed=4, security="active", min_roster=min_roster
        )
        return aggregators.crypto_round(LazyInputs(tuple(ids), rows.__getitem__), plan, drops)

    # every rostered client refuses the roster (protocols.SecAggClient: "fewer than our minimum roster 8") and
    # shares no keys, so the server aborts: the only difference from the accepted round below is min_roster
    with pytest.raises(AbortError, match="0 clients shared keys"):
        crypto_round(8)
    res = crypto_round(7)
    assert sorted(res.survivors) == list(range(7))
    assert np.array_equal(res.aggregate, vectors[:7].sum(axis=0))  # far below q = 2^16: no wrap
    # more than checked in: refused before any message (every client would refuse the roster)
    with pytest.raises(ProtocolError, match="fewer than the clients' minimum roster 11"):
        crypto_round(11)
