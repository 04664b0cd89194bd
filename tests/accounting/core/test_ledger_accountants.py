"""The ledger budgets with any accountant: events persist, re-compose on open, and format-1 files keep opening."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from secagg_dp.accounting import (
    CheckinAccountant,
    CheckinRound,
    Gaussian,
    GaussianSum,
    PLDAccountant,
    PoissonSampled,
    PrivacyLedger,
    RdpAccountant,
    SelfComposed,
    Skellam,
    SubsampledCheckin,
)
from secagg_dp.accounting.core.ledger import LEDGER_FORMAT, RecordedRdp
from secagg_dp.errors import ParameterError, PrivacyBudgetExceeded, UnsupportedEventError

DELTA = 1e-5
G = Gaussian(2.0, 1.0, "add-remove")
SAMPLED = PoissonSampled(0.01, Gaussian(1.0, 1.0, "add-remove"))
DATA = Path(__file__).parent / "data"


def _pld() -> PLDAccountant:
    return PLDAccountant("add-remove", value_discretization_interval=1e-3)


def _rows(path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    finally:
        conn.close()


def test_pld_ledger_reopens_with_the_same_events_and_any_accountant(tmp_path):
    path = tmp_path / "pld.sqlite"
    with PrivacyLedger(path=path, accountant=_pld()) as led:
        led.spend(G).spend(SAMPLED, 50).spend(SelfComposed(G, 2))
        eps_pld = led.epsilon(DELTA)[0]
    direct = _pld().compose(G).compose(SAMPLED, 50).compose(SelfComposed(G, 2))
    with PrivacyLedger(path=path, accountant=_pld()) as again:
        assert [(type(e).__name__, c) for e, c in again.events] == [
            ("Gaussian", 1),
            ("PoissonSampled", 50),
            ("SelfComposed", 1),
        ]
        assert again.epsilon(DELTA)[0] == eps_pld == direct.get_epsilon(DELTA)
        assert again.certificate(DELTA).method == "pld"
    with PrivacyLedger(path=path) as rdp:  # the same file, budgeted with the default RDP accountant
        expect = RdpAccountant("add-remove").compose(G).compose(SAMPLED, 50).compose(SelfComposed(G, 2))
        assert np.array_equal(rdp.rdp, expect.rdp)
        assert rdp.epsilon(DELTA)[0] > eps_pld  # PLD is the tighter certificate of the same events


def test_pld_budget_refuses_before_recording(tmp_path):
    path = tmp_path / "budget.sqlite"
    budget = _pld().compose(SAMPLED, 200).compose(SAMPLED, 100).get_epsilon(DELTA)  # the 2 spends below, not 200 more
    led = PrivacyLedger(path=path, accountant=_pld(), epsilon_budget=budget, delta=DELTA)
    led.spend(SAMPLED, 200)
    entries, eps = led.entries, led.epsilon()[0]
    assert led.would_exceed(SAMPLED, 200)
    with pytest.raises(PrivacyBudgetExceeded, match="pld.*unchanged"):
        led.spend(SAMPLED, 200)
    assert led.entries == entries and led.epsilon()[0] == eps and _rows(path) == 1
    led.spend(SAMPLED, 100)  # exactly the budget's events: accepted
    assert led.epsilon()[0] <= budget
    led.close()


def test_opening_with_an_accountant_that_cannot_compose_an_event_is_refused(tmp_path):
    path = tmp_path / "skellam.sqlite"
    with PrivacyLedger(path=path) as led:
        led.spend(G).spend(Skellam(100.0, 2.0, 4.0, "add-remove"))
    before = path.read_bytes()
    with pytest.raises(UnsupportedEventError, match="event 2.*PLDAccountant"):
        PrivacyLedger(path=path, accountant=_pld())
    assert path.read_bytes() == before


def test_checkin_accountant_budgets_checkin_rounds(tmp_path):
    path = tmp_path / "checkin.sqlite"
    ev = CheckinRound(SubsampledCheckin(GaussianSum(2.0), n=100), 100, 0.2, None, "replace-one")
    acc = CheckinAccountant("rdp", orders=np.arange(2, 65))
    with PrivacyLedger(path=path, accountant=acc) as led:
        led.spend(ev, 3)
    with PrivacyLedger(path=path, accountant=CheckinAccountant("rdp", orders=np.arange(2, 65))) as again:
        assert again.events == [(ev, 3)]
        assert again.epsilon(DELTA)[0] == CheckinAccountant("rdp", orders=np.arange(2, 65)).compose(ev, 3).get_epsilon(
            DELTA
        )


def test_accountant_arguments_are_checked():
    with pytest.raises(ParameterError, match="accountant"):
        PrivacyLedger(accountant=RdpAccountant("add-remove").compose(G))  # not empty
    with pytest.raises(ParameterError, match="neighbouring"):
        PrivacyLedger("replace-one", accountant=_pld())
    with pytest.raises(ParameterError, match="orders"):
        PrivacyLedger(orders=[2, 3], accountant=RdpAccountant("add-remove", [2, 4]))
    with pytest.raises(ParameterError, match="PrivacyAccountant"):
        PrivacyLedger(accountant="rdp")  # type: ignore[arg-type]


def test_budget_is_kept_in_the_file(tmp_path):
    path = tmp_path / "kept.sqlite"
    budget = RdpAccountant("add-remove").compose(G, 3).get_epsilon(DELTA)
    PrivacyLedger(path=path, epsilon_budget=budget, delta=DELTA).close()
    with PrivacyLedger(path=path) as led:  # no budget given: the file's applies
        assert (led.epsilon_budget, led.delta) == (budget, DELTA)
        led.spend(G, 3)
        with pytest.raises(PrivacyBudgetExceeded):
            led.spend(G)
    with pytest.raises(ParameterError, match="only tighten"):
        PrivacyLedger(path=path, epsilon_budget=2 * budget, delta=DELTA)
    with pytest.raises(ParameterError, match="only tighten"):
        PrivacyLedger(path=path, epsilon_budget=budget, delta=1e-6)
    with PrivacyLedger(path=path, epsilon_budget=budget / 2, delta=DELTA) as tighter:
        assert tighter.epsilon_budget == budget / 2


def _legacy_copy(tmp_path) -> tuple[Path, dict]:
    path = tmp_path / "v1.sqlite"
    shutil.copyfile(DATA / "ledger_v1.sqlite", path)
    return path, json.loads((DATA / "ledger_v1.json").read_text())


def test_format_1_ledger_written_by_the_old_code_opens_with_its_figures(tmp_path):
    # ledger_v1.sqlite and its figures were written by the format-1 code (data/make_ledger_v1.py says how)
    path, old = _legacy_copy(tmp_path)
    with PrivacyLedger(path=path) as led:
        assert led.format == "secagg-dp-ledger/1" and led.neighbouring == old["neighbouring"]
        assert [[d, c] for d, c in led.entries] == old["entries"]
        assert all(isinstance(e, RecordedRdp) for e, _ in led.events)
        assert led.rdp.tolist() == old["rdp"]
        assert led.epsilon(old["delta"]) == (old["epsilon"], old["order"])


def test_format_1_ledger_keeps_its_guarantees_and_takes_new_events(tmp_path):
    path, old = _legacy_copy(tmp_path)
    led = PrivacyLedger(path=path, epsilon_budget=old["epsilon_budget"], delta=old["delta"])
    with pytest.raises(PrivacyBudgetExceeded):
        led.spend(Gaussian(0.5, 1.0, "add-remove"))
    assert _rows(path) == 3 and led.format == "secagg-dp-ledger/1"  # a refusal writes nothing
    led.spend(Gaussian(100.0, 1.0, "add-remove"))
    assert led.format == LEDGER_FORMAT
    led.close()
    with PrivacyLedger(path=path) as again:
        assert len(again.entries) == 4 and again.entries[3][0]["type"] == "Gaussian"
        assert again.epsilon(old["delta"])[0] > old["epsilon"]
    with pytest.raises(UnsupportedEventError, match="format-1"):  # the old rows are RDP curves only
        PrivacyLedger(path=path, accountant=_pld())


def test_single_order_rdp_ledger_is_the_renyi_filter_at_that_order(tmp_path):
    # docs/ledger.md: for adaptively chosen events, budget with RDP at one order (Feldman & Zrnic 2021)
    from secagg_dp.accounting.core.conversion import rdp_to_dp

    alpha = 8.0
    per_event = G.rdp(np.array([alpha]))[0]  # alpha / (2 sigma^2) = 1.0 (Mironov 2017, Prop. 7)
    assert per_event == 1.0
    budget = rdp_to_dp(np.array([alpha]), np.array([5 * per_event]), DELTA, warn=False)[0]
    led = PrivacyLedger(
        path=tmp_path / "one.sqlite",
        accountant=RdpAccountant("add-remove", [alpha]),
        epsilon_budget=budget,
        delta=DELTA,
    )
    for _ in range(5):
        led.spend(G)
    with pytest.raises(PrivacyBudgetExceeded):
        led.spend(G)
    assert led.rdp.tolist() == [5.0] and led.orders.tolist() == [alpha]
    led.close()


def test_events_of_other_packages_are_refused_by_a_file_ledger_before_writing(tmp_path):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Mine(Gaussian):  # has an RDP curve, so the RDP accountant composes it; but it lives outside the package
        pass

    mine = Mine(3.0, 1.0, "add-remove")
    PrivacyLedger().spend(mine)  # in memory: nothing to persist
    path = tmp_path / "mine.sqlite"
    with PrivacyLedger(path=path) as led:
        assert not led.supports(mine) and led.supports(G)
        with pytest.raises(ParameterError, match="only top-level classes of modules under"):
            led.spend(mine)
        assert led.entries == [] and _rows(path) == 0


def test_creation_without_hard_links_still_makes_a_private_complete_ledger(tmp_path, monkeypatch):
    import os
    import stat

    def no_link(src, dst):
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "nolink.sqlite"
    with PrivacyLedger(path=path) as led:
        led.spend(G)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and [p.name for p in tmp_path.iterdir()] == ["nolink.sqlite"]


def test_read_only_open_never_writes(tmp_path):
    from secagg_dp.errors import LedgerError

    path, old = _legacy_copy(tmp_path)
    conn = sqlite3.connect(path, isolation_level=None)  # back to the layout before 'format' and 'events' rows
    conn.execute("DELETE FROM meta WHERE key IN ('format', 'events')")
    conn.close()
    before = path.read_bytes()
    with PrivacyLedger(path=path, read_only=True) as led:  # an open for writing would add the two meta rows
        assert led.epsilon(old["delta"])[0] == old["epsilon"]
        with pytest.raises(LedgerError, match="read-only"):
            led.spend(G)
    assert path.read_bytes() == before
    with pytest.raises(LedgerError, match="does not exist"):
        PrivacyLedger(path=tmp_path / "absent.sqlite", read_only=True)
    assert not (tmp_path / "absent.sqlite").exists()
    with pytest.raises(ParameterError, match="read_only"):
        PrivacyLedger(read_only=True)
