"""The coalition certificate in the simulator: ``secagg.corrupt_clients``, results.json's ``privacy.coalition``, the
printed line, and the ``metrics_note`` saying the task metrics are outside the certificate."""

from __future__ import annotations

import pytest

from secagg_dp.errors import ConfigError
from simulations.config import build_config, load_config
from simulations.results import METRICS_NOTE, check_results
from simulations.runner import run_scenario
from tests.simulations.conftest import small_config


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("-1", "an integer >= 0, not -1"),
        ("1.0", "an integer >= 0, not 1.0"),  # TOML 1.0 is a float, not a count of clients
        ("true", "an integer >= 0, not True"),
        ('"two"', "an integer >= 0, not 'two'"),
        ("60", "must be < population.clients = 60"),  # default.toml: n = 60; one client must be honest
    ],
)
def test_corrupt_clients_is_validated_naming_the_key(value, needle):
    with pytest.raises(ConfigError, match="secagg.corrupt_clients") as err:
        build_config({}, [f"secagg.corrupt_clients={value}"])
    assert needle in str(err.value)


def test_corrupt_clients_defaults_to_zero_and_is_overridable():
    assert load_config(None).secagg.corrupt_clients == 0
    assert load_config(None, ["secagg.corrupt_clients=3"]).secagg.corrupt_clients == 3
    assert build_config({"secagg": {"corrupt_clients": 59}}).secagg.corrupt_clients == 59  # n - 1 is allowed


def test_results_record_corrupt_clients_and_say_metrics_are_outside_the_certificate(tmp_path, counting_accountant):
    cfg = small_config(rounds=1, secagg={"corrupt_clients": 2})
    doc = run_scenario(cfg, tmp_path, accountant=counting_accountant)
    assert doc["config"]["secagg"]["corrupt_clients"] == 2
    assert doc["metrics_note"] == METRICS_NOTE and doc["rounds"][0]["metrics"]  # the note sits next to metrics
    assert "not covered by the privacy certificates" in METRICS_NOTE and "mse" in METRICS_NOTE
    check_results(doc)


def test_check_results_refuses_an_incomplete_coalition_record(tmp_path, counting_accountant):
    doc = run_scenario(small_config(rounds=1), tmp_path, accountant=counting_accountant)
    doc["privacy"]["coalition"] = {"observer": "coalition", "epsilon": 1.0, "delta": 1e-5, "method": "rdp"}
    with pytest.raises(ValueError, match=r"privacy.coalition lacks keys \['colluders', 'min_sum', 'planned_epsilon'\]"):
        check_results(doc)
    doc["privacy"]["coalition"].update(colluders=0, min_sum=2, planned_epsilon=1.0, observer="server")
    with pytest.raises(ValueError, match="observer 'server'"):
        check_results(doc)
    doc["privacy"]["coalition"]["observer"] = "coalition"
    check_results(doc)


# --- m = min_sum: the smallest sum the protocol lets finish -------------------------------------------------------


def _smallest_finishing_sum(cfg) -> int:
    """Brute force with the real protocol (independent of :func:`coalition_min_sum`): for every roster size N a
    round can have, the clients configured as the crypto mode configures them (t = threshold_for(N), the
    config's degree and mode, ClientPolicy.min_roster = the config's resolved secagg.min_roster); a roster
    below min_roster is built by max(N, min_roster) check-ins of which the extra ones drop at advertise_keys
    (the clients must refuse it). The smallest number s of masked inputs with which a round finishes, N - s
    clients dropping after the roster (before their masked input). The minimum over N."""
    import numpy as np

    from protocols import run_secagg_round
    from secagg_dp.errors import ProtocolError

    floor = cfg.min_roster
    best = None
    for size in range(2, cfg.population.clients + 1):
        checked_in = max(size, floor)
        t = cfg.secagg.threshold_for(checked_in)
        if t > size:
            continue  # fewer than t in the roster: the round aborts before anything is unmasked
        inputs = {i: np.full(4, i, dtype=np.uint64) for i in range(checked_in)}
        unrostered = set(range(size, checked_in))
        for s in range(1, size + 1):
            drops = {"advertise_keys": unrostered} if unrostered else {}
            if s < size:
                drops["masked_input"] = set(range(size - s))
            try:
                run_secagg_round(
                    inputs,
                    bits=16,
                    threshold=t,
                    dropouts=drops or None,
                    neighbours=cfg.secagg.neighbours,
                    security=cfg.secagg.security,
                    seed=5,
                    min_roster=floor,
                    workers=1,
                )
            except ProtocolError:
                continue
            best = s if best is None else min(best, s)
            break
    assert best is not None
    return best


@pytest.mark.parametrize(
    "secagg",
    [
        {"threshold_fraction": 0.2},  # the default rule: a round of 2 check-ins finishes with 2 (min_roster 2)
        {"threshold_fraction": 0.2, "min_roster": 6},  # rosters of 6 or more: t(6) = 5
        {"threshold": 4},  # an absolute threshold: t = 4 whatever N
        {"threshold": 4, "neighbours": 5},  # SecAgg+ from N = 7 on (t = 4 with 6 holders), full graph below
    ],
    ids=["fraction", "fraction-min-roster", "absolute", "secagg+"],
)
def test_min_sum_is_the_smallest_sum_the_real_protocol_finishes(secagg):
    from simulations.privacy import coalition_min_sum

    cfg = build_config({"population": {"clients": 9}, "secagg": secagg})
    m, rule = coalition_min_sum(cfg)
    assert m == _smallest_finishing_sum(cfg) and rule.startswith(f"{m}: ")


def test_min_sum_under_secaggplus_with_a_roster_floor_is_a_lower_bound_on_the_real_protocol():
    """SecAgg+ rosters of 8 or 9 only (min_roster = 8, k = 5, t = 4): m = t = 4 counts the holders that must
    reveal a self-mask; the real protocol needs more survivors here (every dropped client's neighbourhood must
    keep t of them), so m is conservative, never above the smallest finishing sum."""
    from simulations.privacy import coalition_min_sum

    cfg = build_config({"population": {"clients": 9}, "secagg": {"threshold": 4, "neighbours": 5, "min_roster": 8}})
    m, rule = coalition_min_sum(cfg)
    assert m == 4 and "N >= secagg.min_roster = 8" in rule
    assert 4 <= _smallest_finishing_sum(cfg)


def test_min_sum_known_answers():
    from simulations.privacy import coalition_min_sum

    def m(*overrides: str) -> int:
        return coalition_min_sum(load_config(None, list(overrides)))[0]

    def t(size: int) -> int:
        return max(2, (2 * size) // 3 + 1, -(-size // 5))

    # by hand, default n = 60, active full graph, t(N) = max(2, floor(2N/3) + 1, ceil(0.2 N)); the clients refuse
    # rosters below min_roster = 17 ("auto" at n = 60, p = 0.5, p' = 0.05), so m = t(17) = 12
    assert load_config(None).min_roster == 17
    assert m() == 12 and m("secagg.corrupt_clients=2") == 12 and m("secagg.min_roster=30") == t(30) == 21
    # without the floor (min_roster = 2) the server may build a roster of 2: t(2) = 2
    assert m("secagg.min_roster=2") == 2 and m("secagg.min_roster=2", "secagg.corrupt_clients=1") == 2
    # c = 2 and min_roster = 2: at N = 4, t = 3 and h = 4 holders: 2 colluders reach 2t - h = 2, so the server can
    # split the honest holders (protocols.security) and unmask one client's input: only the target's noise is left
    assert m("secagg.min_roster=2", "secagg.corrupt_clients=2") == 1
    # c = 6 splits at N = 17 (2 t(17) - 17 = 7 > 6 does not; N = 18: t = 13, 2t - N = 8): no split above the floor
    assert m("secagg.corrupt_clients=6") == 12 and m("secagg.corrupt_clients=7") == 1
    # absolute t = 21: min over N >= 21 of 2t(N) - N is 11, at N = 31 (t = max(21, floor(62/3) + 1) = 21)
    assert m("secagg.threshold=21") == m("secagg.threshold=21", "secagg.corrupt_clients=10") == 21
    assert m("secagg.threshold=21", "secagg.corrupt_clients=11") == 1
    assert "N = 31" in coalition_min_sum(load_config(None, ["secagg.threshold=21", "secagg.corrupt_clients=11"]))[1]
    # semi-honest clients (no signed keys, no consistency round) do not stop an active server
    assert m('secagg.security="semi-honest"', "secagg.threshold=21") == 1
    # fixed-size sampling: N = round(0.75 * 16) = 12 always, t(12) = max(2, floor(24/3) + 1, ceil(0.5 * 12)) = 9
    assert coalition_min_sum(small_config(population={"sampling": "fixed"}))[0] == 9


# --- privacy.coalition in results.json ----------------------------------------------------------------------------

_COALITION_KEYS = {"observer", "epsilon", "delta", "method", "planned_epsilon", "colluders", "min_sum", "rounds"}


def _coalition_rdp_oracle(mech, n: int, gamma: float, c: int, m: int, orders) -> list:
    """Per-round RDP of the coalition view, recomputed term by term in mpmath (50 digits): the revealed-flag
    mixture sum_k P(K=k) [(1 - k/n) + (k/n) e^{(a-1) eps_base(k_eff)}] with k_eff = max(1, min(k, m) - c)
    (docs/accounting/observers.md; the per-k base RDP is the library's DDGSum at k_eff, tested on its own)."""
    import mpmath as mp

    mp.mp.dps = 50
    out = []
    for a in orders:
        total = mp.mpf(0)
        for k in range(n + 1):
            pk = mp.binomial(n, k) * mp.mpf(gamma) ** k * (1 - mp.mpf(gamma)) ** (n - k)
            k_eff = max(1, min(k, m) - c)
            base = float(mech.rdp_upper([float(k_eff)], [float(k_eff)], [int(a)])[0][0])
            total += pk * ((1 - mp.mpf(k) / n) + mp.mpf(k) / n * mp.exp((a - 1) * mp.mpf(base)))
        out.append(mp.log(total) / (a - 1))
    return out


def test_coalition_epsilon_matches_an_independent_recomputation(tmp_path):
    import math

    import mpmath as mp

    from secagg_dp.accounting.checkin import bases as cm
    from simulations.privacy import ORDERS, effective_gamma
    from simulations.runner import plan

    # z = 8: the optimal order is interior (7) and the figure moves with c and m (c = 1 or m = 6 give about 2.7)
    cfg = small_config(
        rounds=2, privacy={"method": "rdp", "noise_multiplier": 8.0}, secagg={"threshold": 5, "corrupt_clients": 2}
    )
    doc = run_scenario(cfg, tmp_path)
    coal = doc["privacy"]["coalition"]
    assert (coal["colluders"], coal["min_sum"], coal["method"]) == (2, 5, "rdp")  # t = 5 is safe against c = 2
    p = plan(cfg, 11)
    mech = cm.DDGSum(
        sigma=p.sigma_int, dim=p.padded_dim, l2_sensitivity=2 * p.l2_sensitivity, l1_sensitivity=2 * p.l1_sensitivity
    )
    orders = [int(a) for a in ORDERS if a <= 64]  # the optimum is at a small order here (asserted below)
    rdp = _coalition_rdp_oracle(mech, 16, effective_gamma(0.75, 0.0), 2, 5, orders)
    delta = cfg.privacy.delta
    # CKS20 Prop. 12 at T = 2 rounds, in mpmath
    eps = [
        2 * r + mp.log1p(-mp.mpf(1) / a) - (mp.log(delta) + mp.log(a)) / (a - 1)
        for r, a in zip(rdp, orders, strict=True)
    ]
    best = min(range(len(orders)), key=lambda i: eps[i])
    assert 2 < orders[best] < 64 and coal["order"] == orders[best]
    # the certificate is an upper bound on the exact mixture and, for n = 16, equal to it up to rounding
    assert float(eps[best]) * (1 - 1e-9) <= coal["epsilon"] <= float(eps[best]) * (1 + 1e-6)
    assert math.isfinite(coal["epsilon"]) and coal["epsilon"] > doc["privacy"]["server"]["epsilon"]


def test_default_small_crypto_run_reports_the_coalition_above_the_server_above_the_analyst(tmp_path):
    cfg = load_config(None, ["rounds=2", "population.clients=12", "task.dim=8", "secagg.corrupt_clients=1"])
    assert cfg.mode == "crypto"
    doc = run_scenario(cfg, tmp_path)
    check_results(doc)
    priv = doc["privacy"]
    coal = priv["coalition"]
    assert _COALITION_KEYS <= set(coal) and coal["observer"] == "coalition" and coal["delta"] == priv["delta"]
    # n = 12: min_roster "auto" is 2 (P(roster < 3) > 1e-3 at Bin(12, 0.475)), so t(2) = 2 for the default rule
    assert coal["colluders"] == 1 and coal["min_sum"] == 2 and doc["derived"]["min_roster"] == 2
    assert coal["rounds"] == priv["rounds"] == 2 and coal["planned_epsilon"] == coal["epsilon"]
    assert coal["certificate"] is True and coal["method"] in ("rdp", "window")
    assert coal["epsilon"] >= priv["server"]["epsilon"] >= priv["epsilon"] > 0
    # c = 0 is reported too (an active server alone can still shrink a sum to m), and colluders only add
    doc0 = run_scenario(load_config(None, ["rounds=2", "population.clients=12", "task.dim=8"]), tmp_path / "c0")
    coal0 = doc0["privacy"]["coalition"]
    assert coal0["colluders"] == 0 and doc0["privacy"]["server"]["epsilon"] <= coal0["epsilon"] < coal["epsilon"]


def test_a_larger_min_sum_gives_a_smaller_coalition_epsilon():
    from simulations.privacy import make_accountant
    from simulations.runner import plan

    def coalition(*overrides: str) -> dict:
        cfg = load_config(None, ["mode=ideal", "task.dim=8", *overrides])
        acct = make_accountant(cfg, plan(cfg, 0), None)
        try:
            return acct.describe()
        finally:
            acct.close()

    loose, tight = coalition("secagg.min_roster=2"), coalition("secagg.threshold=21")
    assert (loose["coalition"]["min_sum"], tight["coalition"]["min_sum"]) == (2, 21)
    assert tight["server"]["planned_epsilon"] == loose["server"]["planned_epsilon"]  # the server view ignores t
    assert loose["coalition"]["planned_epsilon"] > tight["coalition"]["planned_epsilon"]
    assert tight["coalition"]["planned_epsilon"] > tight["server"]["planned_epsilon"]


def test_simulate_prints_one_coalition_line_per_run(tmp_path, capsys):
    import json

    from simulations.cli import main

    argv = ["simulate", "--out", str(tmp_path), "--no-plots", "--no-progress", "mode=ideal", "rounds=1"]
    assert main([*argv, "population.clients=20", "task.dim=8", "secagg.corrupt_clients=3", "secagg.threshold=12"]) == 0
    out = capsys.readouterr().out
    coal = json.loads((tmp_path / "results.json").read_text())["privacy"]["coalition"]
    lines = [ln for ln in out.splitlines() if "observer coalition" in ln]
    assert lines == [
        f"default: observer coalition (an active server with 3 colluding clients, sums down to 12 clients): "
        f"epsilon = {coal['epsilon']:.6g} at delta = 1e-05 (client level)"
    ]
    assert out.index("observer server") < out.index("observer coalition") < out.index("certified ε")


def test_enforcement_and_local_steps_configs_get_a_coalition_figure(tmp_path):
    from simulations.privacy import make_accountant
    from simulations.runner import plan

    enforced = small_config(
        rounds=1,
        population={"dropout": 0.05},
        privacy={"mechanism": "skellam", "noise_enforcement": "add-then-remove"},
        secagg={"threshold": 8, "corrupt_clients": 1},
    )
    doc = run_scenario(enforced, tmp_path)
    check_results(doc)
    coal, server = doc["privacy"]["coalition"], doc["privacy"]["server"]
    assert (coal["colluders"], coal["min_sum"]) == (1, 8) and coal["epsilon"] >= server["epsilon"] > 0
    # sample-level local steps (S = 2: each step's own noise, the same for any k): the coalition gets the server's
    local = small_config(
        privacy={"unit": "sample"}, secagg={"bits": 24}, task={"name": "logreg", "local_steps": 2, "sample_rate": 0.5}
    )
    acct = make_accountant(local, plan(local, 11), None)
    try:
        d = acct.describe()
    finally:
        acct.close()
    # min_roster "auto" at Bin(16, 0.75) is 6 (P(roster < 6) = 2.9e-4, P(roster < 7) = 1.6e-3): m = t(6) = 5
    assert d["coalition"]["observer"] == "coalition" and d["coalition"]["min_sum"] == 5
    assert d["coalition"]["planned_epsilon"] >= d["server"]["planned_epsilon"] > 0
