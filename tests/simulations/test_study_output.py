"""What a study prints and plots: identical lines collapsed with a count, the abort warning's numbers named,
and every metric of a run in its own panel."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from simulations.cli.simulate import _warn_aborts, summary_text
from simulations.plots import epsilon_label, plot_run
from simulations.runner import run_scenario
from simulations.study import collapse_lines, observer_lines
from tests.simulations.conftest import CountingAccountant, small_config
from tests.simulations.test_task_failures import Regression


def test_collapse_lines_counts_repeats_in_first_seen_order():
    assert collapse_lines(["a", "b", "a", "c", "a", "b"]) == [
        "a  (identical for 3 runs)",
        "b  (identical for 2 runs)",
        "c",
    ]
    assert collapse_lines([]) == []


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("run")
    return run_scenario(small_config(rounds=2), out, task=Regression(), accountant=CountingAccountant())


def _study(doc: dict[str, Any], seeds: int) -> dict[str, Any]:
    return {
        "study": {"name": "s", "grid": {}, "x": "epsilon", "seed": 1, "seeds": seeds},
        "runs": [{"label": "s", "values": {}, "seed": j, "out": f"s-seed{j}", "results": doc} for j in range(seeds)],
    }


def test_a_studys_seeds_print_their_certificate_once(one_run, tmp_path):
    doc = copy.deepcopy(one_run)
    doc["privacy"].update(epsilon=1.5, server={"epsilon": 2.0})
    lines = observer_lines(_study(doc, 3))
    assert len(lines) == 2  # analyst and server, once each instead of three times
    assert all(line.endswith("(identical for 3 runs)") for line in lines)
    text = summary_text(_study(doc, 3), tmp_path).splitlines()
    certified = [line for line in text if "certified ε" in line]
    assert len(certified) == 1 and certified[0].endswith("(identical for 3 runs)")


def test_abort_warning_says_what_the_number_counts(one_run, capsys):
    doc = copy.deepcopy(one_run)
    doc["summary"].update(
        aborted_rounds=1,
        abort_reasons={"fewer than t = 5 clients checked in": 1},
        epsilon=1.0,
        delta=1e-5,
        epsilon_completed_rounds=0.5,
    )
    _warn_aborts(_study(doc, 2))
    err = capsys.readouterr().err
    assert "(fewer than t = 5 clients checked in (1 round))" in err
    assert "checked in: 1" not in err  # before: a bare trailing ': 1'
    assert err.count("\n") == 1 and "(identical for 2 runs)" in err


def test_the_round_plot_has_a_panel_per_metric(one_run, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures: list[Any] = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (figures.append(fig), close(fig)))
    (path,) = plot_run(one_run, tmp_path)
    assert path.exists()
    labels = [ax.get_ylabel() for ax in figures[0].axes]
    assert labels == ["err", "size", epsilon_label(one_run["privacy"])]  # before: only "err" and epsilon
