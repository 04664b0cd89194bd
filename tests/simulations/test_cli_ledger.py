"""``secagg-dp ledger``: a ledger's events, spent epsilon, budget and remaining budget; bad input exits 2."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from secagg_dp.accounting import Gaussian, PLDAccountant, PoissonSampled, PrivacyLedger, RdpAccountant, Skellam
from secagg_dp.errors import TaskError
from simulations.cli import main

G = Gaussian(5.0, 1.0, "add-remove")
S = PoissonSampled(0.01, Gaussian(1.0, 1.0, "add-remove"))
DELTA = 1e-5


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _strict(text: str) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with PrivacyLedger(path=path, epsilon_budget=2.0, delta=DELTA) as led:
        led.spend(G).spend(S, 100)
    return str(path)


def test_events_lists_events_spent_epsilon_and_remaining_budget(ledger):
    code, out, err = _run(["ledger", ledger, "--events"])
    assert code == 0 and err == ""
    lines = out.splitlines()
    eps = RdpAccountant("add-remove").compose(G).compose(S, 100).get_epsilon(DELTA)  # no ledger involved
    assert lines[0].endswith("format secagg-dp-ledger/3, add-remove, 2 event(s)")
    assert lines[2].split()[:2] == ["1", "1"] and lines[2].split()[2].startswith("Gaussian(sigma=5,")
    assert lines[3].split()[:2] == ["2", "100"] and "PoissonSampled(rate=0.01, event=Gaussian(" in lines[3]
    assert lines[4].startswith(f"spent: epsilon = {eps:.6g} at delta = 1e-05 (rdp, order ")
    assert lines[5] == f"budget: epsilon = 2 at delta = 1e-05, remaining {2.0 - eps:.6g}"


def test_json_is_strict_and_says_what_was_certified(ledger):
    code, out, _ = _run(["ledger", ledger, "--json", "--events", "--delta", "1e-6"])
    doc = _strict(out)
    assert code == 0
    assert [(e["seq"], e["count"], e["event"]["type"]) for e in doc["events"]] == [
        (1, 1, "Gaussian"),
        (2, 100, "PoissonSampled"),
    ]
    acc = RdpAccountant("add-remove").compose(G).compose(S, 100)
    assert doc["delta"] == 1e-6 and doc["epsilon"] == acc.get_epsilon(1e-6)
    assert doc["certificate"]["method"] == "rdp" and doc["certificate"]["certificate"] is True
    assert (doc["epsilon_budget"], doc["budget_delta"]) == (2.0, DELTA)
    assert doc["remaining_epsilon"] == 2.0 - acc.get_epsilon(DELTA)  # the budget's own delta


def test_pld_accountant_recomposes_the_same_events(ledger):
    code, out, _ = _run(["ledger", ledger, "--json", "--accountant", "pld"])
    doc = _strict(out)
    assert code == 0 and doc["accountant"] == "pld" and doc["order"] is None
    assert doc["epsilon"] == PLDAccountant("add-remove").compose(G).compose(S, 100).get_epsilon(DELTA)


def _no_budget(path):
    PrivacyLedger(path=path).close()


def _skellam(path):
    with PrivacyLedger(path=path) as led:
        led.spend(Skellam(100.0, 2.0, 4.0, "add-remove"))


BAD = [
    (lambda p: None, [], "does not exist"),
    (lambda p: p.write_text("hello"), [], "not an SQLite database"),
    (lambda p: p.write_bytes(b""), [], "empty (0 bytes)"),
    (lambda p: p.mkdir(), [], "cannot be read"),
    (_no_budget, [], "'--delta' is required"),
    (_skellam, ["--delta", "1e-5", "--accountant", "pld"], "PLDAccountant cannot compose"),
    (lambda p: p.write_text("hello"), ["--accountant", "pld"], "not a ledger"),
    (_no_budget, ["--delta", "0"], "argument --delta"),
    (_no_budget, ["--accountant", "shuffle"], "argument --accountant"),
]


@pytest.mark.parametrize("make,extra,word", BAD, ids=[w for _, _, w in BAD])
def test_bad_input_is_one_line_exit_2(tmp_path, make, extra, word):
    path = tmp_path / "x.sqlite"
    make(path)
    code, out, err = _run(["ledger", str(path), *extra])
    assert code == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert word in err, err
    if word == "does not exist":
        assert not path.exists()  # inspecting never creates a ledger


def test_checkin_rounds_of_a_simulator_ledger_are_shown(tmp_path):
    import numpy as np

    from secagg_dp.accounting import CheckinRound, DDGSum, SubsampledCheckin

    orders = np.arange(2, 65)
    ev = CheckinRound(SubsampledCheckin(DDGSum(3.0, 16, 2.0, 8.0), n=100), 100, 0.2, None, "replace-one")
    path = tmp_path / "sim.sqlite"
    with PrivacyLedger("replace-one", orders, path=path) as led:
        led.spend(ev).spend(ev)
    code, out, _ = _run(["ledger", str(path), "--delta", "1e-5", "--events"])
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6
    assert all("CheckinRound(provider=SubsampledCheckin(mechanism=DDGSum(sigma=3," in line for line in lines[2:4])
    eps = RdpAccountant("replace-one", orders).compose(ev, 2).get_epsilon(1e-5)
    assert lines[4].startswith(f"spent: epsilon = {eps:.6g} at delta = 1e-05 (rdp, order ")
    assert lines[5] == "budget: none"


def test_inspecting_never_writes_to_the_ledger(ledger):
    from pathlib import Path

    before = Path(ledger).read_bytes()
    for extra in ([], ["--json"], ["--events"], ["--events", "--json"], ["--accountant", "pld"]):
        assert _run(["ledger", ledger, *extra])[0] == 0
    assert Path(ledger).read_bytes() == before


# -- the summary of a simulator ledger -----------------------------------------------------------------------
def _simulate(tmp_path, **sections):
    """A small ideal-mode run (16 clients, dim 24) with its ledger; returns (results.json privacy, ledger path)."""
    from simulations.runner import run_scenario
    from tests.simulations.conftest import small_config

    doc = run_scenario(small_config(**sections), tmp_path / "run", progress=False)
    return doc["privacy"], str(tmp_path / "run" / "ledger.sqlite")


def test_summary_of_a_simulator_ledger_groups_events_uses_the_stored_delta_and_shows_each_observer(tmp_path):
    from secagg_dp.accounting import PrivacyLedger

    privacy, path = _simulate(tmp_path, rounds=3, privacy={"delta": 1e-6, "epsilon_budget": 1e4})
    code, out, err = _run(["ledger", path])  # no --delta: the run's delta (1e-6) is stored in the ledger
    assert code == 0 and err == "", err
    lines = out.splitlines()
    # the 3 identical rounds collapse into ONE readable line: count, mechanism, n, gamma, noise, observer
    assert lines[0].endswith("3 event(s) in 1 group(s) of identical events")
    group = lines[2].split()
    assert group[0] == "3" and group[1] == "CheckinRound:" and "mechanism DDGSum," in lines[2]
    assert "n=16," in lines[2] and f"gamma={privacy['gamma']:.6g}," in lines[2] and "noise sigma=" in lines[2]
    assert "observer analyst" in lines[2] and "[events 1-3: 3 released]" in lines[2]
    assert len(lines[2]) < 200  # readable: the raw description of one event is longer than this
    assert "delta: 1e-06 (stored by the run)" in lines
    # the run's own certificate per observer, exactly as results.json reports it (an independent record)
    for obs, eps in (
        ("analyst", privacy["epsilon"]),
        ("server", privacy["server"]["epsilon"]),
        ("coalition", privacy["coalition"]["epsilon"]),
    ):
        assert any(ln.split()[:4] == [obs, "epsilon", "=", f"{eps:.6g}"] for ln in lines), (obs, out)
    # the ledger's own composition, labelled and explained, recomputed here from the event with a fresh accountant
    with PrivacyLedger(path=path, read_only=True) as led:
        (event, _), orders = led.events[0], led.orders
    comp = RdpAccountant("replace-one", orders).compose(event, 3)
    eps = comp.get_epsilon(1e-6)
    assert any(ln.startswith(f"ledger RDP composition: epsilon = {eps:.6g} at delta = 1e-06") for ln in lines)
    assert any("the run's certificate uses the tightest certified method" in ln for ln in lines)
    assert lines[-1] == f"budget: epsilon = 10000 at delta = 1e-06, remaining {1e4 - eps:.6g}"


def test_summary_json_shape_and_delta_override(tmp_path):
    privacy, path = _simulate(tmp_path, rounds=2)
    code, out, _ = _run(["ledger", path, "--json", "--delta", "1e-3"])
    doc = _strict(out)
    assert code == 0 and "events" not in doc
    assert (doc["delta"], doc["delta_source"]) == (1e-3, "--delta")  # --delta still overrides the stored one
    assert doc["run"] == {"delta": privacy["delta"], "method": privacy["method"], "observer": "analyst"}
    [group] = doc["groups"]
    assert (group["count"], group["events"], group["seq"], group["outcomes"]) == (2, 2, "1-2", {"released": 2})
    assert group["event"]["type"] == "CheckinRound" and group["line"].startswith("CheckinRound: mechanism ")
    assert set(doc["certified"]) == {"analyst", "server", "coalition"}
    for obs, view in (("analyst", privacy), ("server", privacy["server"]), ("coalition", privacy["coalition"])):
        c = doc["certified"][obs]
        assert (c["epsilon"], c["delta"], c["method"]) == (view["epsilon"], privacy["delta"], view["method"])
        assert c["events"] == 2 and c["covers_all_events"] is True
    assert doc["ledger_composition"]["epsilon"] == doc["epsilon"] and doc["ledger_composition"]["delta"] == 1e-3
    assert doc["outcomes"]["counts"] == {"released": 2, "aborted": 0, "failed": 0, "not recorded": 0}
    code, out, _ = _run(["ledger", path, "--json", "--events"])
    doc = _strict(out)
    assert code == 0 and "groups" not in doc and doc["delta_source"] == "stored by the run"
    assert [(e["seq"], e["count"], e["outcome"]) for e in doc["events"]] == [(1, 1, "released"), (2, 1, "released")]
    assert all(e["reason"].endswith("client(s) in the sum") for e in doc["events"])


def test_events_lists_each_round_with_its_outcome(tmp_path):
    _, path = _simulate(tmp_path, rounds=2)
    code, out, _ = _run(["ledger", path, "--events"])
    lines = out.splitlines()
    assert code == 0 and [ln.split()[:2] for ln in lines[2:4]] == [["1", "1"], ["2", "1"]]
    assert all("CheckinRound(provider=" in ln and "[released: " in ln for ln in lines[2:4])


def test_a_failed_run_leaves_a_ledger_that_says_why(tmp_path):
    import dataclasses

    from simulations.runner import run_scenario
    from simulations.tasks.mean import MeanTask
    from tests.simulations.conftest import small_config

    @dataclasses.dataclass(frozen=True)
    class FailsInRound2(MeanTask):
        def server_update(self, model, decoded_sum, participants, root_seed):  # noqa: ANN001, ANN201
            if getattr(self, "_seen", False):
                raise RuntimeError("disk full while saving the model")
            object.__setattr__(self, "_seen", True)
            return super().server_update(model, decoded_sum, participants, root_seed)

    cfg = small_config(rounds=3)
    with pytest.raises(TaskError, match="server_update raised RuntimeError: disk full") as err:
        run_scenario(cfg, tmp_path / "run", task=FailsInRound2(dim=24, clip=cfg.privacy.clip), progress=False)
    path = str(tmp_path / "run" / "ledger.sqlite")
    code, out, _ = _run(["ledger", path, "--json", "--events"])
    events = _strict(out)["events"]
    # round 2 was charged before its release (crash safety), then failed: the ledger keeps the charge and says why
    assert code == 0 and [e["outcome"] for e in events] == ["released", "failed"]
    assert isinstance(err.value.__cause__, RuntimeError)  # the task's own exception, chained
    assert "RuntimeError: disk full while saving the model (round 2" in events[1]["reason"]
    code, out, _ = _run(["ledger", path])
    assert "outcomes: 1 released, 0 aborted, 1 failed" in out
    assert "failed x1: the run failed after the round was charged: TaskError: Task 'mean': server_update raised " in out


def _format2(path, spend_with_budget=False):
    """A ledger in the format-2 layout (no outcomes table, no run metadata), written with sqlite3 directly as
    the previous version wrote it: meta rows format/neighbouring/orders/events (+ budget), one event row."""
    import sqlite3

    from secagg_dp.accounting.core.event_json import event_to_json
    from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS

    orders = [float(a) for a in DEFAULT_ORDERS]
    row = RdpAccountant("add-remove", orders).event_rdp(G, 3)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, count INTEGER NOT NULL,"
        " rdp TEXT NOT NULL);"
    )
    meta = [("format", "secagg-dp-ledger/2"), ("neighbouring", "add-remove"), ("orders", json.dumps(orders))]
    meta += [("events", "1")] + ([("epsilon_budget", "50.0"), ("delta", "1e-05")] if spend_with_budget else [])
    conn.executemany("INSERT INTO meta VALUES (?, ?)", meta)
    conn.execute(
        "INSERT INTO events (event, count, rdp) VALUES (?, ?, ?)",
        (event_to_json(G), 3, json.dumps([float(x) for x in row])),
    )
    conn.close()


def test_a_format_2_ledger_still_opens_and_migrates_on_its_first_write(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    _format2(path)
    before = path.read_bytes()
    with PrivacyLedger(path=path, read_only=True) as led:
        assert led.format == "secagg-dp-ledger/2" and led.run is None and led.certified == {}
        assert led.outcomes == [None] and led.entries[0][1] == 3
    code, out, err = _run(["ledger", str(path)])
    assert code == 2 and "'--delta' is required" in err  # the old format stores no delta of its own
    code, out, _ = _run(["ledger", str(path), "--delta", "1e-5"])
    assert code == 0 and "certified by the run: not recorded in this ledger" in out
    assert "outcomes: 0 released, 0 aborted, 0 failed, 1 not recorded" in out
    assert path.read_bytes() == before  # reading never migrates
    with PrivacyLedger(path=path) as led:
        led.spend(G).record_outcome("aborted", "nothing released")
    with PrivacyLedger(path=path, read_only=True) as led:
        assert led.format == "secagg-dp-ledger/3" and [c for _, c in led.entries] == [3, 1]
        assert led.outcomes == [None, ("aborted", "nothing released")]
        eps = RdpAccountant("add-remove").compose(G, 4).get_epsilon(1e-5)
        assert led.epsilon(1e-5)[0] == eps  # the aborted event is still charged
    conn = sqlite3.connect(path)
    assert [r[1] for r in conn.execute("PRAGMA table_info(outcomes)")] == ["seq", "outcome", "reason"]
    conn.close()


def test_a_ledger_of_a_newer_format_is_refused_clearly(tmp_path):
    import sqlite3

    from secagg_dp.errors import LedgerError

    path = tmp_path / "new.sqlite"
    PrivacyLedger(path=path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE meta SET value = 'secagg-dp-ledger/4' WHERE key = 'format'")
    conn.close()
    with pytest.raises(LedgerError, match=r"written by a newer version of secagg-dp.*Upgrade secagg-dp"):
        PrivacyLedger(path=path, read_only=True)
    code, out, err = _run(["ledger", str(path), "--delta", "1e-5"])
    assert code == 2 and "newer version" in err and out == ""
