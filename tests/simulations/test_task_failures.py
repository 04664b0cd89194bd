"""A user's task that breaks the contract or raises fails with one TaskError naming the task, the method and what
was expected, and the failed run's results.json says why, in which round, and keeps the rounds completed.

Also: a custom task is recorded with its own settings (``describe()`` or its attributes), not the bundled mean
task's defaults; it receives the population size through ``setup(context)``; complex rows are refused.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import pytest

from secagg_dp.errors import ParameterError, TaskError
from simulations.cli import main
from simulations.results import check_results
from simulations.runner import run_scenario
from simulations.tasks.protocol import TaskContext, check_task
from tests.simulations.conftest import CountingAccountant, small_config

HERE = "tests.simulations.test_task_failures"


class Regression:
    """Least squares on 4 points per client; ``fail`` picks a contract breach (or an exception) to make."""

    name = "regression"

    def __init__(self, dim: int = 4, lr: float = 0.25, fail: str = "", fail_round: int = 1) -> None:
        self.vector_dim, self.lr, self.fail, self.fail_round = dim, lr, fail, fail_round
        self._cache: dict[int, Any] = {}  # private: never recorded

    def init_model(self, root_seed: int) -> np.ndarray:
        return np.zeros(self.vector_dim)

    def client_vectors(self, model: Any, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        if self.fail == "raise" and round == self.fail_round:
            raise RuntimeError("boom")
        rows = np.array([np.full(self.vector_dim, 0.01 * (int(c) % 5)) for c in client_ids])
        return rows + 1j if self.fail == "complex" else rows

    def server_update(self, model: Any, decoded_sum: np.ndarray, participants: int, root_seed: int) -> Any:
        model = model + decoded_sum / max(participants, 1)
        if self.fail == "no-tuple" and self.fail_round <= 1:
            return model  # the classic mistake: metrics forgotten
        if self.fail == "three":
            return model, {"err": 1.0}, None
        if self.fail == "metric":
            return model, {"err": "high"}
        return model, {"err": float(np.abs(model).sum()), "size": float(participants)}


class Described(Regression):
    def describe(self) -> dict[str, Any]:
        return {"lr": self.lr, "features": self.vector_dim, "data": "diabetes"}


class Sized(Regression):
    """Needs the population size: each client's share of a fixed data set depends on n."""

    def setup(self, context: TaskContext) -> None:
        self.context = context
        self.clients = context.clients


def _run(task: Any, tmp_path, rounds: int = 3) -> None:
    run_scenario(small_config(rounds=rounds), tmp_path, task=task, accountant=CountingAccountant())


def _doc(tmp_path) -> dict[str, Any]:
    doc = json.loads((tmp_path / "results.json").read_text())
    check_results(doc)
    return doc


def test_server_update_without_a_tuple_is_named_and_recorded(tmp_path):
    with pytest.raises(TaskError) as err:
        _run(Regression(fail="no-tuple"), tmp_path)
    msg = str(err.value)
    assert "'regression'" in msg and "server_update" in msg and "tuple (model, metrics)" in msg
    assert "not an array of shape (4,)" in msg and "round 1" in msg and "\n" not in msg
    doc = _doc(tmp_path)
    assert doc["status"] == "failed"
    assert doc["failure"] == {"type": "TaskError", "message": msg, "round": 1, "rounds_completed": 0}


@pytest.mark.parametrize(
    ("fail", "expected"),
    [("three", "not a tuple of 3 items"), ("metric", "metric 'err' is not a number")],
)
def test_other_server_update_breaches(fail, expected, tmp_path):
    with pytest.raises(TaskError, match=expected):
        _run(Regression(fail=fail), tmp_path)


def test_a_task_that_raises_names_method_round_and_line(tmp_path):
    with pytest.raises(TaskError) as err:
        _run(Regression(fail="raise", fail_round=2), tmp_path)
    msg = str(err.value)
    assert msg.startswith("Task 'regression': client_vectors raised RuntimeError: boom (round 2, at ")
    assert "at test_task_failures.py:" in msg
    assert isinstance(err.value.__cause__, RuntimeError)  # the traceback stays reachable from Python
    doc = _doc(tmp_path)
    assert [r["round"] for r in doc["rounds"]] == [1]  # the completed round is kept
    assert doc["failure"]["round"] == 2 and doc["failure"]["rounds_completed"] == 1
    assert doc["summary"]["rounds_completed"] == 1


def test_the_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    out = tmp_path / "o"
    rc = main(
        [
            "simulate",
            "--out",
            str(out),
            "--no-plots",
            "--no-progress",
            f"task.name={HERE}:Regression",
            'task.options.fail="raise"',
            "task.options.fail_round=2",
            "mode=ideal",
            "rounds=2",
            "population.clients=16",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("secagg-dp: error: Task 'regression': client_vectors raised RuntimeError: boom (round 2")
    assert json.loads((out / "results.json").read_text())["failure"]["round"] == 2


def test_complex_rows_are_refused_not_truncated(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: a ComplexWarning, and the imaginary part silently dropped
        with pytest.raises(TaskError, match=r"client_vectors must return real numbers, not complex ones"):
            check_task(Regression(fail="complex"), root_seed=1, clients=16, unit="client")
    assert issubclass(TaskError, ParameterError)  # callers catching ParameterError still catch it


def test_custom_task_recorded_with_its_own_settings(tmp_path):
    run_scenario(small_config(rounds=1), tmp_path / "a", task=Described(lr=0.5), accountant=CountingAccountant())
    task_doc = _doc(tmp_path / "a")["config"]["task"]
    assert task_doc["reported"] == {"lr": 0.5, "features": 4, "data": "diabetes"}
    assert task_doc["vector_dim"] == 4
    assert "dim" not in task_doc and "learning_rate" not in task_doc  # the mean task's defaults (256, 2.0)
    # without describe(): the public scalar attributes (the private cache is not)
    run_scenario(small_config(rounds=1), tmp_path / "b", task=Regression(lr=0.125), accountant=CountingAccountant())
    reported = _doc(tmp_path / "b")["config"]["task"]["reported"]
    assert reported == {"lr": 0.125, "fail": "", "fail_round": 1}


def test_custom_task_by_name_keeps_its_constructor_options(tmp_path):
    cfg = small_config(rounds=1, task={"name": f"{HERE}:Regression", "options": {"lr": 0.5}})
    run_scenario(cfg, tmp_path, accountant=CountingAccountant())
    task_doc = _doc(tmp_path)["config"]["task"]
    assert task_doc["options"] == {"lr": 0.5}
    assert task_doc["reported"] == {"lr": 0.5, "fail": "", "fail_round": 1}  # its defaults too


def test_setup_receives_the_population_size(tmp_path):
    task = Sized()
    cfg = small_config(rounds=1, population={"clients": 23})
    run_scenario(cfg, tmp_path, task=task, accountant=CountingAccountant())
    assert task.context == TaskContext(clients=23, unit="client", root_seed=11)
    assert _doc(tmp_path)["config"]["task"]["reported"]["clients"] == 23


def test_a_describe_that_returns_no_dict_is_refused(tmp_path):
    class Bad(Regression):
        def describe(self) -> Any:
            return ["lr"]

    with pytest.raises(TaskError, match="describe must return a dict"):
        _run(Bad(), tmp_path, rounds=1)


def test_check_results_wants_a_complete_failure_record():
    doc = json.loads(json.dumps({"failure": {"type": "X", "message": "m"}}))
    with pytest.raises(ValueError, match="failure lacks keys"):
        check_results(
            {
                "schema": "secagg-dp/simulate-results/1",
                "status": "failed",
                "config": {},
                "seeds": {},
                "derived": {},
                "privacy": {"method": "m", "neighbouring": "n", "delta": 1e-5, "accountant": "a"},
                "rounds": [],
                "summary": {},
                "software": {},
                **doc,
            }
        )


def test_a_failed_study_names_the_run_and_round(tmp_path):
    cfg = small_config(rounds=2, study={"seeds": 2})
    with pytest.raises(TaskError):
        from simulations.study import run

        run(cfg, tmp_path, task=Regression(fail="raise", fail_round=2), plots=False)
    study = json.loads((tmp_path / "results.json").read_text())
    assert study["status"] == "failed"
    assert study["failure"]["round"] == 2 and study["failure"]["rounds_completed"] == 1
    assert study["failure"]["type"] == "TaskError" and study["failure"]["out"].endswith("-seed0")


def test_the_flower_path_refuses_complex_updates_too():
    """The Flower client's two entry points for a model update (no Flower needed to call them)."""
    from simulations.flower.client import flatten_arrays
    from simulations.flower.core import FlowerDPConfig, encode_update

    cfg = FlowerDPConfig(dim=3, clip=1.0, noise_multiplier=1.0, sample_size=4, population=8, threshold=3, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ParameterError, match="real numeric array, not dtype complex128"):
            encode_update(cfg, np.array([0.1, 0.2, 0.3]) + 1j, np.random.default_rng(0))

        class Arrays:
            def to_numpy_ndarrays(self) -> list[np.ndarray]:
                return [np.zeros(2), np.ones(1, dtype=np.complex64)]

        with pytest.raises(ParameterError, match="real numbers, not dtype complex64"):
            flatten_arrays(Arrays())
    assert encode_update(cfg, np.array([0.1, 0.2, 0.3]), np.random.default_rng(0)).dtype == np.uint64
