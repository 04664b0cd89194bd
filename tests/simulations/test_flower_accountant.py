"""SecAggDPAccountant (Flower's PrivacyAccountant protocol over our events), tested without flwr.

Oracles: the check-in accountant composing the same rounds directly (the module must charge exactly what it
charges), dp-accounting's own RDP accountant for Flower's Gaussian events (Google's independent implementation of
Mironov, Talwar & Zhang 2019 and Wang, Balle & Kasiviswanathan 2019), and the protocol's member list as flwr 1.41
declares it (flwr/supercore/privacy_accounting/__init__.py). The flwr-side checks are in test_flower.py.
"""

from __future__ import annotations

import copy
import inspect
import json
import math

import numpy as np
import pytest

from secagg_dp.accounting.checkin import (
    CHECKIN_ORDERS,
    CheckinAccountant,
    CheckinRound,
    Coalition,
    checkin_provider,
)
from secagg_dp.accounting.checkin.enforced import enforced_checkin_provider
from secagg_dp.accounting.core.conversion import rdp_to_dp
from secagg_dp.errors import ParameterError, PrivacyBudgetExceeded
from simulations.flower import FlowerDPConfig, round_event
from simulations.flower.accountant import (
    DEFAULT_ORDERS,
    FLOWER_RDP_ORDERS,
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
    SecAggDPAccountant,
    admit_round,
    load_state,
    save_state,
    workflow_accountant,
)

N = 100
WOR = PrivacyConfig(1e-5, N, NeighboringRelation.REPLACE_ONE, SamplingMethod.WITHOUT_REPLACEMENT)
POISSON = PrivacyConfig(1e-5, N, NeighboringRelation.ADD_OR_REMOVE_ONE, SamplingMethod.POISSON)
NOAMP = PrivacyConfig(1e-5, N, NeighboringRelation.ADD_OR_REMOVE_ONE, SamplingMethod.NO_AMPLIFICATION)

# flwr 1.41, flwr/supercore/privacy_accounting/__init__.py, class PrivacyAccountant(Protocol)
PROTOCOL_PROPERTIES = ("config", "num_releases")
PROTOCOL_METHODS = {
    "compose": [("event", inspect.Parameter.empty), ("count", 1)],
    "get_epsilon": [("delta", inspect.Parameter.empty)],
    "get_delta": [("epsilon", inspect.Parameter.empty)],
    "get_privacy_spent": [("delta", None)],
    "would_exceed": [("event", inspect.Parameter.empty), ("max_epsilon", None), ("count", 1)],
    "state_dict": [],
    "load_state_dict": [("state", inspect.Parameter.empty)],
}


def _cfg(**kw):
    base = dict(dim=10, clip=1.0, noise_multiplier=1.0, sample_size=10, population=N, threshold=7, seed=1)
    return FlowerDPConfig(**{**base, **kw})


def _rounds() -> dict[str, CheckinRound]:
    """Our replace-one rounds: DDG and Skellam sums (fixed-size, one under-delivered), check-in with gamma,
    add-then-remove enforcement."""
    ddg = checkin_provider("ddg", N, sigma=40.0, l2_sensitivity=60.0, dim=16)
    enforced = enforced_checkin_provider(
        N, target_variance=1600.0, l2_sensitivity=60.0, dim=16, tolerance=0.1, roster_rate=0.12, sum_rate=0.1
    )
    return {
        "ddg-fixed": round_event(_cfg(), 10),
        "ddg-dropouts": round_event(_cfg(), 8),
        "skellam-fixed": round_event(_cfg(mechanism="skellam"), 9),
        "ddg-checkin": CheckinRound(ddg, N, gamma=0.1, sample_size=None, neighbouring="replace-one"),
        "enforced": CheckinRound(enforced, N, gamma=0.1, sample_size=None, neighbouring="replace-one"),
    }


def test_every_protocol_member_is_there_with_flowers_signature():
    for name in PROTOCOL_PROPERTIES:
        assert isinstance(inspect.getattr_static(SecAggDPAccountant, name), property), name
    for name, params in PROTOCOL_METHODS.items():
        sig = inspect.signature(getattr(SecAggDPAccountant, name))
        got = [(p.name, p.default) for p in list(sig.parameters.values())[1:]]
        assert got == params, name


@pytest.mark.parametrize("observer", ["analyst", "server", "coalition"])
def test_our_rounds_are_charged_exactly_as_the_checkin_accountant_charges_them(observer):
    coalition = Coalition(1, 5) if observer == "coalition" else None
    acc = SecAggDPAccountant(WOR, observer=observer, coalition=coalition, orders=CHECKIN_ORDERS)
    ref = CheckinAccountant("rdp", "replace-one", orders=CHECKIN_ORDERS, observer=observer, coalition=coalition)
    for i, ev in enumerate(_rounds().values()):
        acc.compose(ev, i + 1)
        ref.compose(ev, i + 1)
        for d in (1e-3, 1e-5, 1e-9):
            assert acc.get_epsilon(d) == ref.get_epsilon(d)
        assert acc.get_delta(2.0) == ref.get_delta(2.0)
    assert acc.num_releases == 1 + 2 + 3 + 4 + 5
    spent = acc.get_privacy_spent()
    assert (spent.epsilon, spent.delta, spent.num_releases) == (ref.get_epsilon(1e-5), 1e-5, 15)


def test_fractional_orders_only_tighten_our_rounds():
    """With the default grid (check-in integers plus Flower's fractional orders) a round is charged its RDP at
    ceil(alpha) there, so epsilon is at most the check-in accountant's (same integer orders inside)."""
    ev = _rounds()["ddg-checkin"]
    acc = SecAggDPAccountant(WOR)
    acc.compose(ev, 200)
    ref = CheckinAccountant("rdp", orders=CHECKIN_ORDERS).compose(ev, 200)
    for d in (1e-3, 1e-6):
        assert 0 < acc.get_epsilon(d) <= ref.get_epsilon(d)
    assert set(FLOWER_RDP_ORDERS) <= set(DEFAULT_ORDERS) and set(CHECKIN_ORDERS) <= set(DEFAULT_ORDERS)


def test_local_steps_rounds_compose_under_add_remove():
    prov = checkin_provider("gaussian", N, sigma=1.0, l2_sensitivity=1.0, local_steps=3, sample_rate=0.1)
    ev = CheckinRound(prov, N, gamma=0.1, sample_size=None, neighbouring="add-remove")
    acc = SecAggDPAccountant(POISSON, orders=CHECKIN_ORDERS)
    acc.compose(ev, 4)
    assert acc.get_epsilon(1e-5) == CheckinAccountant("rdp", "add-remove", orders=CHECKIN_ORDERS).compose(
        ev, 4
    ).get_epsilon(1e-5)
    with pytest.raises(ParameterError, match="replace-one"):
        SecAggDPAccountant(WOR).compose(ev)  # the config's relation is replace-one


@pytest.mark.parametrize(("config", "name"), [(POISSON, "poisson"), (WOR, "wor"), (NOAMP, "none")])
def test_flowers_gaussian_events_match_dp_accounting(config, name):
    import dp_accounting as dpa
    from dp_accounting import rdp

    events = [GaussianPrivacyEvent(1.1, 10, N), GaussianPrivacyEvent(0.8, 5, N), GaussianPrivacyEvent(2.0, 30, N)]
    counts = [20, 7, 3]
    orders = [float(o) for o in FLOWER_RDP_ORDERS]
    rel = dpa.NeighboringRelation.REPLACE_ONE if name == "wor" else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    ref = rdp.RdpAccountant(orders=orders, neighboring_relation=rel)
    acc = SecAggDPAccountant(config, orders=FLOWER_RDP_ORDERS)
    for ev, c in zip(events, counts, strict=True):
        g = dpa.GaussianDpEvent(ev.noise_multiplier)
        if name == "poisson":
            ref.compose(dpa.PoissonSampledDpEvent(ev.sample_size / N, g), c)
        elif name == "wor":
            ref.compose(dpa.SampledWithoutReplacementDpEvent(N, ev.sample_size, g), c)
        else:
            ref.compose(g, c)
        acc.compose(ev, c)
    for d in (1e-3, 1e-5, 1e-8):
        # Poisson: dp-accounting drops fractional orders whose series does not converge (it warns), ours keeps them
        assert acc.get_epsilon(d) <= ref.get_epsilon(d) * (1 + 1e-12)
        assert acc.get_epsilon(d) == pytest.approx(ref.get_epsilon(d), rel=0.02)


def test_mixed_history_adds_the_curves():
    import dp_accounting as dpa
    from dp_accounting import rdp

    ev = _rounds()["ddg-fixed"]
    orders = np.arange(2.0, 65.0)  # dp-accounting's without-replacement bound is slow at large orders
    acc = SecAggDPAccountant(WOR, orders=orders)
    acc.compose(ev, 5)
    acc.compose(GaussianPrivacyEvent(1.5, 10, N), 10)
    ck = CheckinAccountant("rdp", orders=orders).compose(ev, 5)
    ref = rdp.RdpAccountant(orders=list(orders), neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    ref.compose(dpa.SampledWithoutReplacementDpEvent(N, 10, dpa.GaussianDpEvent(1.5)), 10)
    total = ck._rdp.rdp + np.asarray(ref._rdp)
    eps = rdp_to_dp(orders, total, 1e-5, warn=False)[0]
    assert acc.get_epsilon(1e-5) == pytest.approx(eps, rel=1e-9)
    assert acc.num_releases == 15


def test_would_exceed_projects_without_changing_state():
    acc = SecAggDPAccountant(PrivacyConfig(1e-5, N, "replace-one", "without-replacement", max_epsilon=3.0))
    ev = _rounds()["ddg-fixed"]
    acc.compose(ev, 2)
    before, state = acc.get_epsilon(1e-5), acc.state_dict()
    after = copy.deepcopy(acc)
    after.compose(ev, 3)
    target = after.get_epsilon(1e-5)
    assert acc.would_exceed(ev, count=3) is (target > 3.0)
    assert acc.would_exceed(ev, max_epsilon=target * 0.999, count=3) is True
    assert acc.would_exceed(ev, max_epsilon=target * 1.001, count=3) is False
    assert acc.get_epsilon(1e-5) == before and acc.state_dict() == state
    with pytest.raises(ParameterError, match="max_epsilon"):
        SecAggDPAccountant(WOR).would_exceed(ev)


def test_state_round_trips_through_json():
    acc = SecAggDPAccountant(WOR, observer="coalition", coalition=Coalition(1, 5))
    for i, ev in enumerate(_rounds().values()):
        acc.compose(ev, i + 1)
    acc.compose(GaussianPrivacyEvent(1.2, 10, N), 4)
    text = json.dumps(acc.state_dict(), allow_nan=False)
    back = SecAggDPAccountant(WOR, observer="coalition", coalition=Coalition(1, 5))
    back.load_state_dict(json.loads(text))
    assert back.num_releases == acc.num_releases == 19
    for d in (1e-3, 1e-7):
        assert back.get_epsilon(d) == acc.get_epsilon(d)
    assert back.state_dict() == acc.state_dict()


def _tamper(state: dict, path: tuple, value: object) -> dict:
    out = copy.deepcopy(state)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def test_tampered_or_mismatched_state_is_refused_and_nothing_changes():
    acc = SecAggDPAccountant(WOR)
    acc.compose(_rounds()["ddg-fixed"], 3)
    state = acc.state_dict()
    victim = SecAggDPAccountant(WOR)
    victim.compose(GaussianPrivacyEvent(3.0, 10, N))
    eps = victim.get_epsilon(1e-5)
    cases = {
        "digest": _tamper(state, ("compositions", 0, "count"), 1),
        "schema": _tamper(state, ("schema_version",), 2),
        "backend": _tamper(state, ("backend",), "rdp"),
    }
    for match, bad in cases.items():
        with pytest.raises(ParameterError, match=match):
            victim.load_state_dict(bad)
    other = SecAggDPAccountant(PrivacyConfig(1e-6, N, "replace-one", "without-replacement"))
    with pytest.raises(ParameterError, match="another config"):
        other.load_state_dict(state)
    with pytest.raises(ParameterError, match="another observer"):
        SecAggDPAccountant(WOR, observer="server").load_state_dict(state)
    # a consistent digest over a foreign type: the ledger's decoder imports nothing outside secagg_dp.accounting
    body = _tamper(state, ("compositions", 0, "event", "dataclass", "type"), "os.system")
    body.pop("digest")
    from simulations.flower.accountant import _digest

    with pytest.raises(ParameterError, match="refused"):
        victim.load_state_dict({**body, "digest": _digest(body)})
    assert victim.get_epsilon(1e-5) == eps and victim.num_releases == 1


def test_bad_events_and_configs_name_the_argument():
    acc = SecAggDPAccountant(WOR)
    with pytest.raises(ParameterError, match="population_size"):
        acc.compose(GaussianPrivacyEvent(1.0, 5, 50))
    with pytest.raises(ParameterError, match="clients"):
        acc.compose(round_event(_cfg(population=50), 10))
    with pytest.raises(ParameterError, match="event"):
        acc.compose("round")
    with pytest.raises(ParameterError, match="count"):
        acc.compose(GaussianPrivacyEvent(1.0, 5, N), 0)
    with pytest.raises(ParameterError, match="sampling_method"):
        PrivacyConfig(1e-5, N, "replace-one", "poisson")
    with pytest.raises(ParameterError, match="sample_size"):
        GaussianPrivacyEvent(1.0, 101, N)
    assert acc.num_releases == 0 and acc.get_epsilon(1e-5) == 0.0


def test_the_workflow_refuses_a_round_whose_worst_case_would_exceed_and_persists(tmp_path, caplog):
    cfg = _cfg()
    worst = round_event(cfg, cfg.threshold)
    one = CheckinAccountant("rdp", orders=CHECKIN_ORDERS).compose(worst).get_epsilon(cfg.delta)
    ref = CheckinAccountant("rdp", orders=CHECKIN_ORDERS).compose(round_event(cfg, 10)).compose(worst)
    two = ref.get_epsilon(cfg.delta)
    budget = (one + two) / 2  # one worst-case round fits; a full round then the worst case does not
    acc = workflow_accountant(cfg, max_epsilon=budget)
    admit_round(acc, cfg, 0)
    acc.compose(round_event(cfg, 10))  # a full round
    path = tmp_path / "acc.json"
    save_state(acc, path)
    restarted = workflow_accountant(cfg, max_epsilon=budget)
    assert load_state(restarted, path) and restarted.get_epsilon(cfg.delta) == acc.get_epsilon(cfg.delta)
    with pytest.raises(PrivacyBudgetExceeded, match="round 1 refused"):
        admit_round(restarted, cfg, 1)
    assert "round 1 refused" in caplog.text
    assert restarted.num_releases == 1
    admit_round(workflow_accountant(cfg), cfg, 1)  # no budget: nothing to refuse
    assert not load_state(workflow_accountant(cfg), tmp_path / "missing.json")
    assert math.isfinite(restarted.get_epsilon(cfg.delta))


class _NoGrid:
    """A Flower Grid stand-in that records every call: a refused round must not reach it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get_node_ids(self) -> list[int]:
        self.calls.append("get_node_ids")
        return list(range(N))

    def send_and_receive(self, *args: object, **kwargs: object) -> list[object]:  # pragma: no cover - refused
        self.calls.append("send_and_receive")
        return []


def test_the_workflow_loads_its_accountant_and_refuses_before_any_message(tmp_path):
    from simulations.flower.server import SecAggDPWorkflow

    cfg = _cfg()
    path = tmp_path / "acc.json"
    spent = workflow_accountant(cfg)
    spent.compose(round_event(cfg, 10), 3)  # an earlier run's three rounds
    save_state(spent, path)
    budget = spent.get_epsilon(cfg.delta) * 1.01  # below any fourth round's cost
    wf = SecAggDPWorkflow(cfg, epsilon_budget=budget, accountant_path=path)
    try:
        assert wf.accountant.num_releases == 3  # loaded on start
        grid = _NoGrid()
        with pytest.raises(PrivacyBudgetExceeded, match="round 3 refused"):
            wf.run_round(grid, None, 3)
        assert grid.calls == [] and wf.accountant.num_releases == 3
    finally:
        wf.close()
    with pytest.raises(ParameterError, match="another config"):  # a state file of another run's parameters
        SecAggDPWorkflow(_cfg(noise_multiplier=2.0, population=50), accountant_path=path)
