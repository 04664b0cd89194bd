"""The epsilon in results.json is the accountant's certificate, spent round by round in the core ledger."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from secagg_dp.accounting.core.ledger import PrivacyLedger
from secagg_dp.errors import ConfigError
from simulations.privacy import ORDERS, effective_gamma
from simulations.results import read_results
from simulations.runner import plan, run_scenario
from tests.simulations.conftest import small_config


def _reopen(path, neighbouring: str = "replace-one") -> PrivacyLedger:
    """Resume the run's ledger file exactly as a user would (orders and relation must match)."""
    return PrivacyLedger(neighbouring, ORDERS, path=path)


def test_round_event_is_validated():
    from secagg_dp.accounting.checkin import bases as cm
    from secagg_dp.accounting.checkin import mixture as ck
    from secagg_dp.errors import ParameterError
    from simulations.privacy import CheckinRound

    prov = ck.SubsampledCheckin(mechanism=cm.SkellamSum(100.0, 2.0, 4.0), n=10)
    ok = CheckinRound(provider=prov, clients=10, gamma=0.3, sample_size=None, neighbouring="replace-one")
    assert ok.rdp(ORDERS).shape == ORDERS.shape and np.all(ok.rdp(ORDERS) > 0)
    with pytest.raises(ParameterError, match="provider"):
        CheckinRound(provider=prov, clients=10, gamma=0.3, sample_size=None, neighbouring="add-remove")
    with pytest.raises(ParameterError, match="Exactly one"):
        CheckinRound(provider=prov, clients=10, gamma=0.3, sample_size=3, neighbouring="replace-one")
    with pytest.raises(ParameterError, match="sample_size"):
        CheckinRound(provider=prov, clients=10, gamma=None, sample_size=11, neighbouring="replace-one")
    with pytest.raises(ParameterError, match="integers"):
        ok.rdp([2.5, 3.0])


def test_certified_epsilon_is_the_checkin_accountants(tmp_path):
    from secagg_dp.accounting.checkin import bases as cm
    from secagg_dp.accounting.checkin import mixture as ck

    cfg = small_config(
        rounds=3,
        population={"clients": 40, "checkin": 0.5, "dropout": 0.1},
        privacy={"noise_multiplier": 4.0},
        secagg={"threshold_fraction": 0.2},
    )
    doc = run_scenario(cfg, tmp_path)
    p = plan(cfg, 11)
    # independent recomputation straight from the accounting API (replace-one: twice the codec's bounds)
    mech = cm.DDGSum(
        sigma=p.sigma_int, dim=p.padded_dim, l2_sensitivity=2 * p.l2_sensitivity, l1_sensitivity=2 * p.l1_sensitivity
    )
    prov = ck.SubsampledCheckin(mechanism=mech, n=40)
    gamma = 0.5 * 0.9**3
    assert effective_gamma(0.5, 0.1) == pytest.approx(gamma)
    with warnings.catch_warnings():  # the best-order-at-the-edge warning is not under test here
        warnings.simplefilter("ignore")
        # method "auto" (the default): the certified method with the smallest epsilon for the planned 3 rounds
        planned = {
            m: ck.checkin_epsilon(prov, 40, gamma, 3, cfg.privacy.delta, ORDERS, method=m) for m in ("rdp", "window")
        }
        chosen = min(planned, key=lambda m: planned[m].epsilon)
        assert chosen == "window" and planned["window"].epsilon < planned["rdp"].epsilon  # here: 2.78 < 3.67
        # round by round: the window of the planned run, fixed (valid for every t <= 3; one mixture reused)
        window = planned["window"].window
        for t, rnd in enumerate(doc["rounds"], start=1):
            want = ck.window_certificate(prov, 40, gamma, t, cfg.privacy.delta, ORDERS, window=window)
            assert rnd["epsilon"] == pytest.approx(want.epsilon, rel=1e-12)
            assert rnd["epsilon"] <= ck.checkin_epsilon(prov, 40, gamma, t, cfg.privacy.delta, ORDERS).epsilon
        assert doc["rounds"][-1]["epsilon"] == pytest.approx(planned["window"].epsilon, rel=1e-12)
    eps = [r["epsilon"] for r in doc["rounds"]]
    assert eps == sorted(eps) and doc["privacy"]["neighbouring"] == "replace-one"
    assert doc["privacy"]["method"] == chosen and doc["privacy"]["method_requested"] == "auto"
    assert doc["privacy"]["methods_compared"] == pytest.approx({m: c.epsilon for m, c in planned.items()}, rel=1e-12)
    assert doc["privacy"]["certificate"]["certificate"] is True and doc["privacy"]["certificate"]["citation"]
    assert doc["privacy"]["gamma"] == pytest.approx(gamma)
    # the core ledger on disk: one event per round, resumable, giving the reported epsilon
    with _reopen(tmp_path / "ledger.sqlite") as led:
        assert led.neighbouring == "replace-one" and len(led.entries) == 3
        assert all(e == (doc["privacy"]["ledger"]["event"], 1) for e in led.entries)
        rdp_want = ck.checkin_epsilon(prov, 40, gamma, 3, cfg.privacy.delta, ORDERS).epsilon
        assert led.epsilon(cfg.privacy.delta)[0] == pytest.approx(rdp_want, rel=1e-12)  # the ledger budgets by RDP


@pytest.mark.slow  # over ~3 s under load: CI only, not the quick loop
def test_logreg_epsilon_is_the_local_steps_accountants(tmp_path):
    from secagg_dp.accounting.checkin import local_steps as ls
    from secagg_dp.accounting.checkin import mixture as ck

    task = {"name": "logreg", "local_steps": 3, "sample_rate": 0.4}
    cfg = small_config(
        rounds=2,
        population={"clients": 30, "checkin": 0.6, "dropout": 0.1},
        privacy={"mechanism": "skellam", "noise_multiplier": 2.0, "unit": "sample"},
        secagg={"bits": 24},
        task=task,
    )
    doc = run_scenario(cfg, tmp_path)
    p = plan(cfg, 11)
    # direct call: S = 3 Poisson(q = 0.4) steps of the client's own Skellam noise, one sample's codec bounds
    # (add-remove), client check-in by joint convexity at k/n, K ~ Bin(30, 0.6 * 0.9^3)
    base = ls.LocalStepsSkellam(
        variance=p.sigma_int**2,
        l2_sensitivity=p.l2_sensitivity,
        l1_sensitivity=p.l1_sensitivity,
        steps=3,
        sample_rate=0.4,
    )
    prov = ck.SubsampledCheckin(mechanism=base, n=30, amplification="joint-convexity", neighbouring="add-remove")
    for t, rnd in enumerate(doc["rounds"], start=1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = ck.checkin_epsilon(prov, 30, 0.6 * 0.9**3, t, cfg.privacy.delta)
        assert rnd["epsilon"] == pytest.approx(want.epsilon, rel=1e-12)
    assert doc["privacy"]["neighbouring"] == "add-remove" and doc["privacy"]["unit"] == "sample"
    assert doc["status"] == "complete" and 0 < doc["rounds"][0]["epsilon"] < doc["rounds"][1]["epsilon"]


def test_more_local_steps_cost_more_privacy_at_the_same_noise():
    from simulations.privacy import make_accountant

    eps = []
    for steps in (1, 4):
        cfg = small_config(
            rounds=5,
            privacy={"mechanism": "ddg", "unit": "sample"},
            secagg={"bits": 24},
            task={"name": "logreg", "local_steps": steps, "sample_rate": 0.5},
        )
        acct = make_accountant(cfg, plan(cfg, 11))
        eps.append(acct.planned_epsilon)
        acct.close()
    assert eps[1] > eps[0] > 0


def test_interrupted_run_keeps_ledger_and_results_in_step(tmp_path):
    # method "rdp": the reported epsilon is then the ledger's own (the ledger composes RDP)
    cfg = small_config(rounds=4, privacy={"noise_multiplier": 4.0, "method": "rdp"})

    def stop(doc):
        if len(doc["rounds"]) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(cfg, tmp_path, on_round=stop)
    disk = read_results(tmp_path / "results.json")
    with _reopen(tmp_path / "ledger.sqlite") as led:  # committed rows survive the interruption
        assert len(led.entries) == len(disk["rounds"]) == 2
        assert led.epsilon(cfg.privacy.delta)[0] == pytest.approx(disk["rounds"][-1]["epsilon"], rel=1e-12)
    assert disk["status"] == "interrupted"


def test_budget_refusal_stops_before_the_round_is_released(tmp_path):
    cfg = small_config(rounds=4, privacy={"noise_multiplier": 4.0})
    full = run_scenario(cfg, tmp_path / "full")
    budget = 0.5 * (full["rounds"][1]["epsilon"] + full["rounds"][2]["epsilon"])  # between rounds 2 and 3
    capped = small_config(rounds=4, privacy={"noise_multiplier": 4.0, "epsilon_budget": budget})
    doc = run_scenario(capped, tmp_path / "capped")
    disk = read_results(tmp_path / "capped" / "results.json")
    assert disk["status"] == doc["status"] == "budget_exhausted"
    assert [r["round"] for r in disk["rounds"]] == [1, 2] and disk["privacy"]["refused"]["round"] == 3
    assert disk["rounds"][-1]["epsilon"] <= budget < full["rounds"][2]["epsilon"]
    with _reopen(tmp_path / "capped" / "ledger.sqlite") as led:
        assert len(led.entries) == 2  # the refused round left no row


def test_a_new_run_in_the_same_folder_starts_a_new_ledger(tmp_path):
    run_scenario(small_config(rounds=3), tmp_path)
    run_scenario(small_config(rounds=2), tmp_path)
    with _reopen(tmp_path / "ledger.sqlite") as led:
        assert len(led.entries) == 2


def test_ledger_rdp_is_rounds_times_the_per_round_mixture(tmp_path):
    cfg = small_config(
        rounds=3,
        population={"clients": 400, "checkin": 0.5},
        privacy={"method": "window", "noise_multiplier": 4.0},
        task={"dim": 8},
    )
    doc = run_scenario(cfg, tmp_path)
    curve = doc["privacy"]["per_round_rdp"]
    assert curve["orders"] == [int(o) for o in ORDERS]
    per_round = np.array(curve["values"])
    with _reopen(tmp_path / "ledger.sqlite") as led:
        assert np.allclose(led.rdp, 3 * per_round, rtol=1e-12, atol=0)
        rdp_eps = led.epsilon(cfg.privacy.delta)[0]
    # window reports its own certificate for T = 3 ledger rounds; the ledger's RDP epsilon is also valid
    assert doc["privacy"]["certificate"]["method"] == "window" and doc["privacy"]["certificate"]["rounds"] == 3
    assert doc["rounds"][-1]["epsilon"] == doc["privacy"]["certificate"]["epsilon"] and rdp_eps > 0


def test_ddg_with_more_than_4096_clients_at_large_grid_sigma_is_certified():
    # Regression: the check-in DDG tau once overflowed (math.exp) for k > 4096 at a large grid sigma; the
    # accountant must now certify such a run with a finite epsilon (tau is bounded without overflow).
    import math

    from simulations.privacy import make_accountant

    cfg = small_config(
        rounds=1, population={"clients": 6000, "checkin": 0.5}, secagg={"bits": 32}, task={"name": "mean", "dim": 8}
    )
    acct = make_accountant(cfg, plan(cfg, 11))
    try:
        assert cfg.privacy.mechanism == "ddg"
        assert math.isfinite(acct.planned_epsilon) and acct.planned_epsilon > 0
    finally:
        acct.close()


def test_logreg_client_unit_is_the_client_level_mixture_whatever_the_steps(tmp_path):
    # privacy.unit = "client" (default): the clipped S-step update is noised once, so the certificate is the
    # replace-one check-in mixture of DDGSum with twice the codec's one-vector sensitivities (as for 'mean'),
    # independent of S; results.json states the unit and both observers.
    from secagg_dp.accounting.checkin import bases as cm
    from secagg_dp.accounting.checkin import mixture as ck
    from secagg_dp.accounting.checkin.observers import server_certificate, server_ex_post_certificate

    docs = []
    for steps in (1, 3):
        cfg = small_config(
            rounds=2,
            population={"clients": 30, "checkin": 0.6, "dropout": 0.0},
            privacy={"mechanism": "ddg", "noise_multiplier": 2.0},
            secagg={"bits": 24},
            task={"name": "logreg", "local_steps": steps, "sample_rate": 0.4},
        )
        assert cfg.privacy.unit == "client"
        docs.append(run_scenario(cfg, tmp_path / str(steps)))
    p = plan(cfg, 11)
    mech = cm.DDGSum(
        sigma=p.sigma_int, dim=p.padded_dim, l2_sensitivity=2 * p.l2_sensitivity, l1_sensitivity=2 * p.l1_sensitivity
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # method "auto": the smaller of the rdp and window certificates for the planned 2 rounds
        want = min(
            (
                ck.checkin_epsilon(ck.SubsampledCheckin(mech, 30), 30, 0.6, 2, cfg.privacy.delta, ORDERS, method=m)
                for m in ("rdp", "window")
            ),
            key=lambda c: c.epsilon,
        )
        server = min(
            (server_certificate(mech, 30, 0.6, 2, cfg.privacy.delta, ORDERS, method=m) for m in ("rdp", "window")),
            key=lambda c: c.epsilon,
        )
    for doc in docs:
        priv = doc["privacy"]
        assert priv["unit"] == "client" and priv["neighbouring"] == "replace-one" and priv["observer"] == "analyst"
        assert priv["method"] == want.method
        assert doc["rounds"][-1]["epsilon"] == pytest.approx(want.epsilon, rel=1e-12)
        assert priv["server"]["observer"] == "server"
        assert priv["server"]["method"] == server.method
        assert priv["server"]["epsilon"] == pytest.approx(server.epsilon, rel=1e-12)
        assert priv["server"]["epsilon"] > priv["epsilon"]
        assert priv["server"]["ex_post"]["ex_post"] is True
        assert priv["server"]["ex_post"]["epsilon"] == pytest.approx(
            server_ex_post_certificate(mech, 30, 0.6, 2, cfg.privacy.delta).epsilon, rel=1e-12
        )
    assert docs[0]["rounds"][-1]["epsilon"] == docs[1]["rounds"][-1]["epsilon"]


def test_sample_unit_needs_logreg():
    from simulations.config import build_config

    with pytest.raises(ConfigError, match="privacy.unit"):
        build_config({}, ['privacy.unit="sample"'])
    with pytest.raises(ConfigError, match="privacy.unit"):
        build_config({}, ['task.name="logreg"', 'privacy.unit="everyone"'])
