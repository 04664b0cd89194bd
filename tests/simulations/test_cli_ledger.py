"""``secagg-dp ledger``: a ledger's events, spent epsilon, budget and remaining budget; bad input exits 2."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from secagg_dp.accounting import Gaussian, PLDAccountant, PoissonSampled, PrivacyLedger, RdpAccountant, Skellam
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


def test_text_lists_events_spent_epsilon_and_remaining_budget(ledger):
    code, out, err = _run(["ledger", ledger])
    assert code == 0 and err == ""
    lines = out.splitlines()
    eps = RdpAccountant("add-remove").compose(G).compose(S, 100).get_epsilon(DELTA)  # no ledger involved
    assert lines[0].endswith("format secagg-dp-ledger/2, add-remove, 2 event(s)")
    assert lines[2].split()[:2] == ["1", "1"] and lines[2].split()[2].startswith("Gaussian(sigma=5,")
    assert lines[3].split()[:2] == ["2", "100"] and "PoissonSampled(rate=0.01, event=Gaussian(" in lines[3]
    assert lines[4].startswith(f"spent: epsilon = {eps:.6g} at delta = 1e-05 (rdp, order ")
    assert lines[5] == f"budget: epsilon = 2 at delta = 1e-05, remaining {2.0 - eps:.6g}"


def test_json_is_strict_and_says_what_was_certified(ledger):
    code, out, _ = _run(["ledger", ledger, "--json", "--delta", "1e-6"])
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
    code, out, _ = _run(["ledger", str(path), "--delta", "1e-5"])
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6
    assert all("CheckinRound(provider=SubsampledCheckin(mechanism=DDGSum(sigma=3," in line for line in lines[2:4])
    eps = RdpAccountant("replace-one", orders).compose(ev, 2).get_epsilon(1e-5)
    assert lines[4].startswith(f"spent: epsilon = {eps:.6g} at delta = 1e-05 (rdp, order ")
    assert lines[5] == "budget: none"


def test_inspecting_never_writes_to_the_ledger(ledger):
    from pathlib import Path

    before = Path(ledger).read_bytes()
    for extra in ([], ["--json"], ["--accountant", "pld"]):
        assert _run(["ledger", ledger, *extra])[0] == 0
    assert Path(ledger).read_bytes() == before
