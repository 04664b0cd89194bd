"""The coalition certificate in the simulator: ``secagg.corrupt_clients``, results.json's ``privacy.coalition``, the
printed line, and the ``metrics_note`` saying the task metrics are outside the certificate."""

from __future__ import annotations

import pytest

from secagg_dp.errors import ConfigError
from simulations.config import build_config, load_config
from simulations.results import METRICS_NOTE, check_results
from simulations.runner import run_scenario
from tests.simulations.conftest import small_config


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("-1", "an integer >= 0, not -1"),
        ("1.0", "an integer >= 0, not 1.0"),  # TOML 1.0 is a float, not a count of clients
        ("true", "an integer >= 0, not True"),
        ('"two"', "an integer >= 0, not 'two'"),
        ("60", "must be < population.clients = 60"),  # default.toml: n = 60; one client must be honest
    ],
)
def test_corrupt_clients_is_validated_naming_the_key(value, needle):
    with pytest.raises(ConfigError, match="secagg.corrupt_clients") as err:
        build_config({}, [f"secagg.corrupt_clients={value}"])
    assert needle in str(err.value)


def test_corrupt_clients_defaults_to_zero_and_is_overridable():
    assert load_config(None).secagg.corrupt_clients == 0
    assert load_config(None, ["secagg.corrupt_clients=3"]).secagg.corrupt_clients == 3
    assert build_config({"secagg": {"corrupt_clients": 59}}).secagg.corrupt_clients == 59  # n - 1 is allowed


def test_results_record_corrupt_clients_and_say_metrics_are_outside_the_certificate(tmp_path, counting_accountant):
    cfg = small_config(rounds=1, secagg={"corrupt_clients": 2})
    doc = run_scenario(cfg, tmp_path, accountant=counting_accountant)
    assert doc["config"]["secagg"]["corrupt_clients"] == 2
    assert doc["metrics_note"] == METRICS_NOTE and doc["rounds"][0]["metrics"]  # the note sits next to metrics
    assert "not covered by the privacy certificates" in METRICS_NOTE and "mse" in METRICS_NOTE
    check_results(doc)


def test_check_results_refuses_an_incomplete_coalition_record(tmp_path, counting_accountant):
    doc = run_scenario(small_config(rounds=1), tmp_path, accountant=counting_accountant)
    doc["privacy"]["coalition"] = {"observer": "coalition", "epsilon": 1.0, "delta": 1e-5, "method": "rdp"}
    with pytest.raises(ValueError, match=r"privacy.coalition lacks keys \['colluders', 'min_sum', 'planned_epsilon'\]"):
        check_results(doc)
    doc["privacy"]["coalition"].update(colluders=0, min_sum=2, planned_epsilon=1.0, observer="server")
    with pytest.raises(ValueError, match="observer 'server'"):
        check_results(doc)
    doc["privacy"]["coalition"]["observer"] = "coalition"
    check_results(doc)
