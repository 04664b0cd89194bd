"""results.json: schema, atomic rewrite after every round, readable partial file on interruption."""

from __future__ import annotations

import json

import pytest

from simulations.results import check_results, read_results, write_atomic
from simulations.runner import run_scenario
from tests.simulations.conftest import small_config


def test_results_schema_and_content(tmp_path, counting_accountant):
    cfg = small_config(rounds=3, population={"dropout": 0.2})
    doc = run_scenario(cfg, tmp_path, accountant=counting_accountant)
    disk = read_results(tmp_path / "results.json")
    assert disk["status"] == "complete" and len(disk["rounds"]) == 3
    assert disk["config"]["seed"] == 11 and disk["seeds"]["root"] == 11
    assert disk["config"]["population"]["dropout"] == 0.2
    for i, rnd in enumerate(disk["rounds"], start=1):
        assert rnd["round"] == i and rnd["epsilon"] == 0.5 * i  # epsilon is whatever the accountant said
        assert rnd["included"] <= rnd["checked_in"] <= 16
        assert set(rnd["dropped"]) == {"advertise_keys", "share_keys", "masked_input", "unmasking"}
    assert disk["privacy"]["method"] == "test-counter"
    assert disk["summary"]["epsilon"] == 1.5
    assert doc["rounds"] == disk["rounds"]


def test_interrupted_run_leaves_partial_results(tmp_path, counting_accountant):
    cfg = small_config(rounds=5)
    seen = []

    def stop_after_two(doc):
        seen.append(json.loads((tmp_path / "results.json").read_text()))  # written before the callback
        if len(doc["rounds"]) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(cfg, tmp_path, accountant=counting_accountant, on_round=stop_after_two)
    disk = read_results(tmp_path / "results.json")
    assert disk["status"] == "interrupted" and len(disk["rounds"]) == 2
    assert [len(s["rounds"]) for s in seen] == [1, 2] and seen[0]["status"] == "running"
    assert counting_accountant.rounds == 2  # the accountant saw exactly the rounds that were written
    assert not list(tmp_path.glob(".results.json.*"))  # no temp files left behind


def test_schema_checker_rejects_broken_documents():
    with pytest.raises(ValueError, match="schema"):
        check_results({"schema": "nope"})
    with pytest.raises(ValueError, match="lack keys"):
        check_results({"schema": "secagg-dp/simulate-results/1", "status": "running"})


def test_write_atomic_never_leaves_a_torn_file(tmp_path):
    path = tmp_path / "r.json"
    write_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        write_atomic(path, {"a": object()})  # serialisation fails before the file is touched
    assert json.loads(path.read_text()) == {"a": 1}
    assert write_atomic(path, {"x": float("nan")}) is None and json.loads(path.read_text()) == {"x": None}


def test_study_plotted_against_a_swept_key(tmp_path):
    from simulations.study import run

    cfg = small_config(
        rounds=2,
        study={
            "grid": {"population.dropout": [0.0, 0.3], "privacy.mechanism": ["ddg", "skellam"]},
            "x": "population.dropout",
        },
    )
    doc = run(cfg, tmp_path)
    assert doc["status"] == "complete" and len(doc["runs"]) == 4 and doc["plots"] == ["study.png"]
    assert (tmp_path / "study.png").stat().st_size > 1000
    assert all((tmp_path / r["out"] / "rounds.png").exists() for r in doc["runs"])
