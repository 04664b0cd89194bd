"""The ledger's run metadata (delta, method, observer), the caller's certified epsilon and round outcomes:
stored durably, read by every handle, validated on open, and never changing what is charged."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from secagg_dp.accounting import Gaussian, PrivacyLedger, RdpAccountant
from secagg_dp.errors import LedgerError, ParameterError

G = Gaussian(4.0, 1.0, "add-remove")


def test_run_certified_and_outcomes_persist_and_are_seen_by_other_handles(tmp_path):
    path = tmp_path / "l.sqlite"
    with PrivacyLedger(path=path) as a, PrivacyLedger(path=path) as b:
        a.set_run(delta=1e-6, method="window", observer="analyst")
        a.spend(G, certified={"analyst": {"epsilon": 0.5, "delta": 1e-6, "method": "window"}})
        a.record_outcome("released", "12 client(s) in the sum")
        b.spend(G, certified={"analyst": {"epsilon": 0.7, "delta": 1e-6, "method": "window"}})  # reads a's row
        b.record_outcome("aborted", "fewer than t clients")
        a.record_outcome("failed", "crashed", seq=2)  # a later outcome of the same event replaces it
    with PrivacyLedger(path=path, read_only=True) as led:
        assert led.run == {"delta": 1e-6, "method": "window", "observer": "analyst"}
        assert led.certified == {"analyst": {"epsilon": 0.7, "delta": 1e-6, "method": "window", "events": 2}}
        assert led.outcomes == [("released", "12 client(s) in the sum"), ("failed", "crashed")]
        # outcomes never change the charge: both events compose (oracle: a fresh accountant, no ledger)
        assert led.epsilon(1e-6)[0] == RdpAccountant("add-remove").compose(G, 2).get_epsilon(1e-6)


def test_in_memory_ledger_keeps_the_same_records():
    led = PrivacyLedger()
    led.set_run(delta=1e-5, method="rdp", observer="server")
    led.spend(G, certified={"server": {"epsilon": math.inf, "delta": 1e-5}}).record_outcome("aborted")
    assert led.run == {"delta": 1e-5, "method": "rdp", "observer": "server"}
    assert led.certified == {"server": {"epsilon": None, "delta": 1e-5, "events": 1}}  # inf stored as null
    assert led.outcomes == [("aborted", "")]


@pytest.mark.parametrize(
    "call,word",
    [
        (lambda led: led.record_outcome("done"), "'outcome'"),
        (lambda led: led.record_outcome("released", 3), "'reason'"),
        (lambda led: led.record_outcome("released", seq=2), "'seq'"),
        (lambda led: led.record_outcome("released", seq=0), "'seq'"),
        (lambda led: led.set_run(delta=0.0, method="rdp", observer="analyst"), "'delta'"),
        (lambda led: led.set_run(delta=1e-5, method="", observer="analyst"), "'method'"),
        (lambda led: led.spend(G, certified={"analyst": {"epsilon": -1.0, "delta": 1e-5}}), "epsilon"),
        (lambda led: led.spend(G, certified={"analyst": {"epsilon": 1.0, "delta": 1.0}}), "delta"),
        (lambda led: led.spend(G, certified={"analyst": {"epsilon": 1.0, "delta": 1e-5, "x": object()}}), "JSON"),
        (lambda led: led.spend(G, certified=[1]), "'certified'"),
    ],
)
def test_bad_arguments_name_the_parameter_and_change_nothing(tmp_path, call, word):
    path = tmp_path / "l.sqlite"
    with PrivacyLedger(path=path) as led:
        led.spend(G)
        before = path.read_bytes()
        with pytest.raises(ParameterError, match=word):
            call(led)
        assert led.outcomes == [None] and led.run is None and led.certified == {} and len(led.events) == 1
    assert path.read_bytes() == before


def test_read_only_handle_records_nothing(tmp_path):
    path = tmp_path / "l.sqlite"
    with PrivacyLedger(path=path) as led:
        led.spend(G)
    with PrivacyLedger(path=path, read_only=True) as led:
        with pytest.raises(LedgerError, match="read-only"):
            led.record_outcome("released")
        with pytest.raises(LedgerError, match="read-only"):
            led.set_run(delta=1e-5, method="rdp", observer="analyst")


@pytest.mark.parametrize(
    "sql,word",
    [
        ("INSERT INTO outcomes VALUES (1, 'leaked', '')", "outcome of event 1"),
        ("INSERT INTO meta VALUES ('run', '{\"delta\": 2}')", "meta row 'run'"),
        ("INSERT INTO meta VALUES ('certified', '[1]')", "meta row 'certified'"),
        ("DROP TABLE outcomes", "no 'outcomes' table"),
    ],
)
def test_damaged_records_are_refused_on_open(tmp_path, sql, word):
    path = tmp_path / "l.sqlite"
    with PrivacyLedger(path=path) as led:
        led.spend(G)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(sql)
    conn.close()
    with pytest.raises(LedgerError, match=word):
        PrivacyLedger(path=path, read_only=True)


def test_certified_is_written_in_the_spends_transaction(tmp_path):
    # a refused spend (budget) stores neither the event nor its certified epsilon
    from secagg_dp.errors import PrivacyBudgetExceeded

    path = tmp_path / "l.sqlite"
    eps1 = RdpAccountant("add-remove").compose(G).get_epsilon(1e-5)
    with PrivacyLedger(path=path, epsilon_budget=eps1 * (1 + 1e-9), delta=1e-5) as led:
        led.spend(G, certified={"analyst": {"epsilon": 1.0, "delta": 1e-5}})
        with pytest.raises(PrivacyBudgetExceeded):
            led.spend(G, certified={"analyst": {"epsilon": 2.0, "delta": 1e-5}})
    conn = sqlite3.connect(path)
    stored = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'certified'").fetchone()[0])
    conn.close()
    assert stored == {"analyst": {"epsilon": 1.0, "delta": 1e-5, "events": 1}}
