"""The ``communication`` object of results.json (crypto mode), its summary, and the summary table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulations.cli.simulate import summary_text
from simulations.results import check_results, read_results
from simulations.runner import run_scenario, summarise_communication
from simulations.study import format_table, summary_rows
from tests.simulations.conftest import small_config

KEYS = {"upload_bytes_mean", "upload_bytes_max", "download_bytes_mean", "download_bytes_max", "raw_bytes"}


def test_crypto_results_carry_communication_per_round_and_in_summary(tmp_path, counting_accountant):
    cfg = small_config(mode="crypto", rounds=2, population={"dropout": 0.05}, secagg={"threshold_fraction": 0.7})
    run_scenario(cfg, tmp_path, accountant=counting_accountant)
    doc = read_results(tmp_path / "results.json")
    # with these seeds round 1 aborts (8 of 12 clients left, t = 9) and round 2 completes with a dropout
    assert [r["aborted"] for r in doc["rounds"]] == [True, False] and doc["rounds"][1]["dropped"]["masked_input"]
    assert doc["rounds"][0]["communication"] is None  # an aborted round is not measured
    raw = 32 * 20 // 8  # dim 24 is padded to 32 coordinates of 20 bits
    for rnd in doc["rounds"][1:]:
        comm = rnd["communication"]
        assert KEYS <= set(comm) and comm["raw_bytes"] == raw
        assert comm["clients"] == rnd["checked_in"] - rnd["dropped"]["advertise_keys"]  # every client that sent
        assert 0 < comm["upload_bytes_mean"] <= comm["upload_bytes_max"]
        assert 0 < comm["download_bytes_mean"] <= comm["download_bytes_max"]
        assert comm["upload_bytes_max"] > raw  # the masked vector alone is at least the raw vector
        stages = comm["stages"]
        assert list(stages)[0] == "advertise_keys" and "consistency" in stages  # active mode by default
        assert sum(s["upload_bytes_mean"] for s in stages.values()) == pytest.approx(comm["upload_bytes_mean"])
    broken = json.loads(json.dumps(doc))
    del broken["rounds"][1]["communication"]["raw_bytes"]
    with pytest.raises(ValueError, match="round 2: communication lacks keys"):
        check_results(broken)
    total = doc["summary"]["communication"]
    assert KEYS <= set(total) and total["rounds"] == 1 and total["raw_bytes"] == raw
    rounds = [r["communication"] for r in doc["rounds"][1:]]
    assert total["download_bytes_max"] == max(r["download_bytes_max"] for r in rounds)
    weights = [r["clients"] for r in rounds]
    mean = sum(w * r["upload_bytes_mean"] for w, r in zip(weights, rounds, strict=True)) / sum(weights)
    assert total["upload_bytes_mean"] == pytest.approx(mean)

    table = format_table(summary_rows(doc))
    assert "up kB/client" in table.splitlines()[0] and "down kB/client" in table.splitlines()[0]
    assert f"{total['upload_bytes_mean'] / 1e3:.4g}" in table.splitlines()[2]
    text = summary_text(doc, Path(tmp_path))
    down = f"download {total['download_bytes_mean'] / 1e3:.4g} kB mean, {total['download_bytes_max'] / 1e3:.4g} kB max"
    assert down in text and f"the {raw / 1e3:.4g} kB unmasked vector" in text


def test_ideal_mode_reports_no_communication(tmp_path, counting_accountant):
    run_scenario(small_config(rounds=1), tmp_path, accountant=counting_accountant)
    doc = read_results(tmp_path / "results.json")
    assert doc["rounds"][0]["communication"] is None and doc["summary"]["communication"] is None
    assert "kB" not in format_table(summary_rows(doc)) and "communication" not in summary_text(doc, tmp_path)


def test_summary_weights_rounds_by_their_clients_and_skips_aborted_ones():
    def rec(clients, up, up_max):
        stats = {"upload_bytes_mean": up, "upload_bytes_max": up_max, "download_bytes_mean": 1.0}
        stats["download_bytes_max"] = 1
        return {"clients": clients, "raw_bytes": 10, **stats, "stages": {"masked_input": dict(stats)}}

    s = summarise_communication([rec(1, 100.0, 100), None, rec(3, 200.0, 250)])
    assert s["upload_bytes_mean"] == 175.0 and s["upload_bytes_max"] == 250 and s["rounds"] == 2
    assert s["stages"]["masked_input"]["upload_bytes_mean"] == 175.0 and s["clients_mean"] == 2.0
    assert summarise_communication([None, None]) is None


def test_a_seed_reproduces_the_secaggplus_bytes(tmp_path, counting_accountant):
    # the SecAgg+ graph, and so who receives which boxes and signatures, follows the round id: the simulator
    # derives it from the round's seed, so the same config gives the same figures run after run
    cfg = small_config(mode="crypto", rounds=1, population={"dropout": 0.05}, secagg={"neighbours": 4})
    docs = [run_scenario(cfg, tmp_path / f"r{i}", accountant=counting_accountant) for i in range(2)]
    first, second = (d["rounds"][0]["communication"] for d in docs)
    assert first is not None and first == second
