"""`secagg-dp simulate`: default run, overrides, --json, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest

from simulations.cli import main


@pytest.mark.slow
def test_default_run_prints_a_summary_table(tmp_path, capsys):
    # the real default scenario (full crypto), exactly as a user runs it, minus the output folder
    assert main(["simulate", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "epsilon" in out and "mse" in out and "default" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["status"] == "complete" and len(doc["rounds"]) == 5
    assert (tmp_path / "rounds.png").stat().st_size > 1000


def test_small_run_with_overrides_and_json(tmp_path, capsys):
    rc = main(
        [
            "simulate",
            "--out",
            str(tmp_path),
            "--json",
            "--no-plots",
            "mode=ideal",
            "rounds=2",
            "population.clients=30",
            "--set",
            "task.dim=16",
            "--seed",
            "5",
        ]
    )
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["population"]["clients"] == 30 and doc["config"]["seed"] == 5
    assert doc["config"]["mode"] == "ideal" and len(doc["rounds"]) == 2
    assert doc["summary"]["epsilon"] == doc["rounds"][-1]["epsilon"] > 0


def test_a_run_whose_rounds_all_abort_says_so(tmp_path, capsys):
    # 30 % per-stage dropout with threshold 20 of ~30 checked-in clients (the default active mode): in each of the
    # 5 seeded rounds fewer than t clients are left after an early stage, so nothing is released
    argv = ["simulate", "--out", str(tmp_path / "o"), "--no-plots", "--seed", "1", "population.dropout=0.3"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    s = doc["summary"]
    assert s["aborted_rounds"] == len(doc["rounds"]) == 5 and all(r["aborted"] for r in doc["rounds"])
    assert sum(s["abort_reasons"].values()) == 5
    for reason in s["abort_reasons"]:
        assert reason.startswith("fewer than the threshold t clients")
    # every round charged: the run's epsilon is the 5-round one, the completed rounds alone would certify 0
    assert s["epsilon"] == doc["rounds"][-1]["epsilon"] > doc["rounds"][0]["epsilon"] > 0
    assert s["epsilon_completed_rounds"] == 0.0
    warn = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warn) == 1 and "5 of 5 rounds aborted" in warn[0] and f"{s['epsilon']:.4g}" in warn[0]


def test_a_run_without_aborts_has_no_abort_warning(tmp_path, capsys):
    assert main(["simulate", "--out", str(tmp_path / "o"), "--no-plots", "--seed", "1", "rounds=2"]) == 0
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert doc["summary"]["aborted_rounds"] == 0 and doc["summary"]["abort_reasons"] == {}
    assert doc["summary"]["epsilon_completed_rounds"] == doc["summary"]["epsilon"]
    assert "aborted" not in capsys.readouterr().err
