"""Studies with several seeds per variant: distinct root seeds, mean ± std error bars, parameters in titles."""

from __future__ import annotations

import json

import pytest

from secagg_dp.errors import ConfigError
from simulations.config import load_config
from simulations.plots import describe
from simulations.study import run, summary_rows


def test_each_variant_runs_once_per_seed_with_consecutive_root_seeds(tmp_path):
    cfg = load_config(
        None,
        [
            "rounds=2",
            "seed=10",
            "population.clients=30",
            "task.dim=8",
            'study.grid={"population.dropout"=[0.0, 0.2]}',
            'study.x="population.dropout"',
            "study.seeds=2",
        ],
    )
    study = run(cfg, tmp_path, plots=False)
    seeds = [(r["values"]["population.dropout"], r["seed"]) for r in study["runs"]]
    assert seeds == [(0.0, 10), (0.0, 11), (0.2, 10), (0.2, 11)]
    assert study["study"]["seeds"] == 2
    # same variant, different seeds: different data and coins, hence (almost surely) different errors
    mse = [r["results"]["summary"]["final_metrics"]["mse"] for r in study["runs"][:2]]
    assert mse[0] != mse[1]
    # the certificate depends on the configuration only, not on the seed
    assert study["runs"][0]["results"]["privacy"]["epsilon"] == study["runs"][1]["results"]["privacy"]["epsilon"]
    rows = summary_rows(json.loads((tmp_path / "results.json").read_text()))
    assert [r["run"] for r in rows][:2] == ["dropout=0.0 seed=10", "dropout=0.0 seed=11"]


def test_a_single_scenario_with_seeds_becomes_a_study(tmp_path):
    cfg = load_config(None, ["rounds=1", "seed=3", "population.clients=20", "task.dim=4", "study.seeds=3"])
    study = run(cfg, tmp_path, plots=False)
    assert [r["seed"] for r in study["runs"]] == [3, 4, 5]


@pytest.mark.parametrize("bad", [0, 101, 1.5, "two"])
def test_seeds_must_be_a_small_positive_integer(bad):
    with pytest.raises(ConfigError, match="study.seeds"):
        load_config(None, [f"study.seeds={bad!r}".replace("'", '"')])


def test_titles_state_the_parameters_and_mark_swept_keys():
    doc = {
        "config": {
            "population": {"clients": 1000, "checkin": 0.1, "dropout": 0.3},
            "privacy": {"noise_multiplier": 4.0, "mechanism": "ddg", "delta": 1e-5},
            "secagg": {"bits": 20},
            "rounds": 20,
            "task": {"name": "mean"},
        }
    }
    text = describe(doc, ("population.dropout",))
    assert text == "n=1000, p=0.1, p'=swept, z=4, bits=20, noise=ddg, δ=1e-05, T=20"
