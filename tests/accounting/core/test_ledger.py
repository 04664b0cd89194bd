"""Accountant contract (shared base class), ledger persistence, crash/resume, budget refusal."""

from __future__ import annotations

import json
import os
import sqlite3
import textwrap

import numpy as np
import pytest

from secagg_dp.accounting import (
    DEFAULT_ORDERS,
    Composed,
    DistributedDiscreteGaussian,
    Gaussian,
    PoissonSampled,
    PrivacyLedger,
    RdpAccountant,
    SampledWithoutReplacement,
    SelfComposed,
    Skellam,
    UnsupportedEventError,
)
from secagg_dp.accounting.core.events import PrivacyEvent
from secagg_dp.errors import ParameterError, PrivacyBudgetExceeded

G = Gaussian(1.0, 1.0, "add-remove")


class AccountantContract:
    """Every accountant's tests inherit this (cf. dp-accounting privacy_accountant_test)."""

    def make(self, neighbouring: str = "add-remove"):
        raise NotImplementedError

    def compose(self, acc, event, count=1):
        return acc.compose(event, count)

    def test_supports_own_events(self):
        acc = self.make()
        for ev in (
            G,
            PoissonSampled(0.1, G),
            Skellam(100.0, 3.0, 9.0, "add-remove"),
            DistributedDiscreteGaussian(10, 5.0, 16, 3.0, 9.0, "add-remove"),
            Composed((G, PoissonSampled(0.2, G))),
            SelfComposed(G, 3),
        ):
            assert acc.supports(ev)

    def test_unsupported_names_sub_event_and_keeps_state(self):
        acc = self.make()
        self.compose(acc, G)
        before = acc.rdp.copy()
        wrong = SampledWithoutReplacement(5, 10, Gaussian(1.0, 2.0, "replace-one"))
        assert not acc.supports(wrong)
        with pytest.raises(UnsupportedEventError, match="SampledWithoutReplacement"):
            self.compose(acc, wrong)

        class Foreign(PrivacyEvent):
            neighbouring = "add-remove"

        with pytest.raises(UnsupportedEventError, match="Foreign"):
            self.compose(acc, SelfComposed(Foreign(), 2))
        assert np.array_equal(acc.rdp, before)

    def test_compose_chains_and_adds(self):
        acc = self.make()
        assert self.compose(acc, G, 2) is acc
        self.compose(acc, PoissonSampled(0.1, G))
        expect = 2 * G.rdp(DEFAULT_ORDERS) + PoissonSampled(0.1, G).rdp(DEFAULT_ORDERS)
        assert np.allclose(acc.rdp, expect, rtol=1e-15, atol=0)

    def test_zero_count_and_empty(self):
        acc = self.make()
        self.compose(acc, G, 0)
        assert np.all(acc.rdp == 0)

    def test_epsilon_grows_with_composition(self):
        acc = self.make()
        self.compose(acc, G)
        e1 = acc.epsilon(1e-5)[0] if isinstance(acc, PrivacyLedger) else acc.get_epsilon(1e-5)
        self.compose(acc, G)
        e2 = acc.epsilon(1e-5)[0] if isinstance(acc, PrivacyLedger) else acc.get_epsilon(1e-5)
        assert e2 > e1 > 0


class TestRdpAccountant(AccountantContract):
    def make(self, neighbouring="add-remove"):
        return RdpAccountant(neighbouring)

    def test_neighbouring_must_match(self):
        acc = RdpAccountant("replace-one")
        assert not acc.supports(G)
        assert acc.supports(Gaussian(1.0, 2.0, "replace-one"))
        with pytest.raises(ParameterError):
            RdpAccountant("swap")


class TestPrivacyLedger(AccountantContract):
    def make(self, neighbouring="add-remove"):
        return PrivacyLedger(neighbouring)

    def compose(self, acc, event, count=1):
        return acc.spend(event, count)


def test_mixed_relations_refused_at_construction():
    with pytest.raises(ParameterError, match="neighbouring"):
        Composed((G, Gaussian(1.0, 2.0, "replace-one")))
    with pytest.raises(ParameterError, match="add-remove"):
        PoissonSampled(0.1, Gaussian(1.0, 2.0, "replace-one"))
    with pytest.raises(ParameterError, match="sigma"):
        Gaussian(-1.0, 1.0, "add-remove")


def _count_rows(path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    finally:
        conn.close()


def test_refusal_leaves_memory_and_file_unchanged(tmp_path):
    path = tmp_path / "l.sqlite"
    led = PrivacyLedger("add-remove", path=path, epsilon_budget=3.0, delta=1e-5)
    ev = PoissonSampled(0.05, G)
    spent = 0
    with pytest.raises(PrivacyBudgetExceeded, match="unchanged"):
        for _ in range(10_000):
            led.spend(ev, 10)
            spent += 1
    assert spent > 0
    rdp, entries = led.rdp, led.entries
    rows = _count_rows(path)
    assert led.would_exceed(ev, 10)
    with pytest.raises(PrivacyBudgetExceeded):
        led.spend(ev, 10)
    assert np.array_equal(led.rdp, rdp) and led.entries == entries
    assert _count_rows(path) == rows == spent
    assert led.epsilon()[0] <= 3.0
    led.close()


def test_resume_and_mismatch(tmp_path):
    path = tmp_path / "l.sqlite"
    with PrivacyLedger("add-remove", path=path) as led:
        led.spend(G, 2).spend(Skellam(50.0, 2.0, 4.0, "add-remove"))
        rdp = led.rdp
    with PrivacyLedger("add-remove", path=path) as again:
        assert np.array_equal(again.rdp, rdp)
        assert [e["type"] for e, _ in again.entries] == ["Gaussian", "Skellam"]
    with pytest.raises(ParameterError, match="neighbouring"):
        PrivacyLedger("replace-one", path=path)


_CHILD = textwrap.dedent(
    """
    import sys, time
    from secagg_dp.accounting import PrivacyLedger, Gaussian, PoissonSampled
    led = PrivacyLedger("add-remove", path=sys.argv[1])
    ev = PoissonSampled(0.01, Gaussian(1.0, 1.0, "add-remove"))
    for i in range(100000):
        led.spend(ev, 1)
        print(i, flush=True)
        time.sleep(0.01)
    """
)


@pytest.mark.slow  # over ~3 s under load: CI only, not the quick loop
def test_crash_between_events_never_undercounts(tmp_path, run_until_killed):
    path = tmp_path / "crash.sqlite"
    acknowledged = run_until_killed(_CHILD, path, 5)
    assert acknowledged >= 5
    ev = PoissonSampled(0.01, Gaussian(1.0, 1.0, "add-remove"))
    with PrivacyLedger("add-remove", path=path) as led:
        n = len(led.entries)
        # every event the child acknowledged (printed after spend returned) is on disk
        assert n >= acknowledged + 1
        assert np.allclose(led.rdp, n * ev.rdp(DEFAULT_ORDERS), rtol=1e-12, atol=0)
        led.spend(ev)
        assert len(led.entries) == n + 1
    assert os.path.exists(path)
    json.dumps(led.entries)  # descriptions are JSON
