"""Bad input gets one clear ConfigError before any work starts."""

from __future__ import annotations

import pytest

from secagg_dp.errors import ConfigError
from simulations.config import build_config, expand_study, list_bundled, load_config, parse_override


@pytest.mark.parametrize(
    ("raw", "overrides", "needle"),
    [
        ({"bogus": 1}, [], "Unknown config key 'bogus'"),
        ({"population": {"clientz": 3}}, [], "Unknown config key 'population.clientz'"),
        ({}, ["secagg.bitz=3"], "Unknown config key 'secagg.bitz'"),
        ({"population": {"checkin": 1.5}}, [], "population.checkin"),
        ({"population": {"checkin": -0.1}}, [], "population.checkin"),
        ({"population": {"checkin": 0}}, [], "population.checkin"),
        ({"population": {"dropout": 1.0}}, [], "population.dropout"),
        ({"population": {"clients": 10}, "secagg": {"threshold": 11}}, [], "secagg.threshold"),
        ({"secagg": {"threshold": 3, "threshold_fraction": 0.5}}, [], "exclusive"),
        ({"secagg": {"bits": 63}}, [], "secagg.bits"),
        ({"rounds": "5"}, [], "rounds"),
        ({"mode": "magic"}, [], "mode"),
        ({"task": {"name": "mean", "local_steps": 2}}, [], "task.local_steps"),
        ({"population": {"sampling": "fixed", "dropout": 0.1}}, [], "population.dropout"),
        ({"study": {"grid": {"population.nope": [1]}}}, [], "study.grid"),
        ({}, ["population.dropout"], "key=value"),
        ({"privacy": {"epsilon_budget": 0}}, [], "privacy.epsilon_budget"),
        ({"study": {"grid": {"population.dropout": [0.1]}, "x": "bits"}}, [], "study.x"),
    ],
)
def test_bad_config_raises_config_error(raw, overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        build_config(raw, overrides)


def test_threshold_greater_than_clients_via_override():
    with pytest.raises(ConfigError, match="must be <= population.clients = 60, not 61"):  # default.toml: n = 60
        build_config({}, ["secagg.threshold=61"])


def test_one_set_of_defaults_shown_in_the_docstring():
    import copy
    import re
    import tomllib

    import simulations.config as config

    # build_config and load_config start from the same scenario: default.toml
    assert build_config({}) == load_config(None)
    assert build_config({}).as_dict() == load_config("default").as_dict()
    # the docstring's TOML block (commented keys are comments) has exactly default.toml's keys and values
    block = config.__doc__.split(".. code-block:: toml", 1)[1].split("\n\nOverrides", 1)[0]
    shown = tomllib.loads("\n".join(ln[4:] for ln in block.splitlines()))
    toml = tomllib.loads((config.CONFIG_DIR / "default.toml").read_text())
    study = shown.pop("study")
    assert shown == toml
    want = copy.deepcopy(config.DEFAULTS)
    assert study == {k: v for k, v in want["study"].items() if k != "grid"} and want["study"]["grid"] == {}
    # the commented optional keys of the docstring are the ones default.toml leaves out
    commented = set(re.findall(r"^\s*# (\w+) = ", block, flags=re.M))
    assert {"threshold", "neighbours", "epsilon_budget", "grid"} <= commented


def test_bits_too_small_for_clients_is_a_config_error_before_work(tmp_path):
    from simulations.study import run

    cfg = build_config({"population": {"clients": 1000}, "secagg": {"bits": 4}})
    with pytest.raises(ConfigError, match="secagg.bits"):
        run(cfg, tmp_path / "out")
    assert not (tmp_path / "out" / "results.json").exists()  # nothing started


def test_bad_study_variant_is_refused_before_the_first_variant_runs(tmp_path):
    from simulations.study import run

    cfg = build_config({"population": {"clients": 50}, "study": {"grid": {"secagg.bits": [20, 3]}}})
    with pytest.raises(ConfigError, match="bits=3"):
        run(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_overrides_parse_toml_values_and_bare_words():
    assert parse_override("population.dropout=0.3") == ("population.dropout", 0.3)
    assert parse_override("mode=crypto") == ("mode", "crypto")
    assert parse_override('mode="crypto"') == ("mode", "crypto")
    cfg = build_config({}, ["population.clients=40", "task.name=logreg", "task.local_steps=3"])
    assert (cfg.population.clients, cfg.task.name, cfg.task.local_steps) == (40, "logreg", 3)


def test_absolute_threshold_replaces_the_default_fraction():
    cfg = build_config({"secagg": {"threshold": 7, "security": "semi-honest"}})
    assert cfg.secagg.threshold_fraction is None and cfg.secagg.threshold_for(30) == 7


@pytest.mark.parametrize(
    ("secagg", "checked_in", "expect"),
    [
        ({"threshold": 7}, 30, 21),  # active full graph: floor(2 * 30 / 3) + 1
        ({"threshold": 25}, 30, 25),  # above the floor: kept
        ({"threshold_fraction": 0.5}, 30, 21),
        ({"threshold_fraction": 0.5, "neighbours": 10}, 30, 6),  # SecAgg+: floor(11 / 2) + 1
        ({"threshold_fraction": 0.5, "security": "semi-honest"}, 30, 15),
    ],
)
def test_active_mode_raises_the_threshold_to_the_secure_minimum(secagg, checked_in, expect):
    assert build_config({"secagg": secagg}).secagg.threshold_for(checked_in) == expect


def test_unknown_security_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="secagg.security"):
        build_config({"secagg": {"security": "malicious"}})


def test_every_bundled_config_validates_including_the_bit_budget():
    from simulations.runner import plan

    names = list_bundled()
    assert {"default", "dropouts", "sampling", "local_steps", "bits"} <= set(names)
    for name in names:
        for _, _, variant in expand_study(load_config(name)):
            plan(variant, 0)


def test_missing_file_and_invalid_toml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("rounds = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
