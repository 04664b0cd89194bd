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
