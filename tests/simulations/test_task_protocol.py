"""A user's task, defined here (not in the package), runs through the simulator by the simulations.Task protocol.

It runs in ideal and crypto mode, in-process and on Dask, with the same results for the same seed; rows above
the clip are clipped by the simulator (the certificate does not move); a malformed task is refused before any
round with a one-line error, from Python, from a config's import path and from the command line.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from secagg_dp.errors import ConfigError, ParameterError
from simulations import SampleLevelTask, Task
from simulations.executors import InProcessExecutor
from simulations.runner import aggregate_round, plan, run_scenario
from simulations.tasks import LogRegTask, MeanTask
from tests.simulations.conftest import CountingAccountant, small_config

HERE = "tests.simulations.test_task_protocol"


class LinearRegressionTask:
    """Federated least squares: client i holds 6 points (x, y = x . w* + noise) drawn from (root, i); its update
    is one local gradient step, times ``scale`` (scale > 1 makes rows far above the clip)."""

    name = "linreg"

    def __init__(self, dim: int = 8, lr: float = 0.1, scale: float = 1.0) -> None:
        self.vector_dim = dim
        self.lr = lr
        self.scale = scale
        self.calls = 0

    def _data(self, root_seed: int, cid: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(7, cid)))
        w_star = np.linspace(-1.0, 1.0, self.vector_dim)
        x = rng.standard_normal((6, self.vector_dim))
        return x, x @ w_star + 0.1 * rng.standard_normal(6)

    def init_model(self, root_seed: int) -> np.ndarray:
        return np.zeros(self.vector_dim)

    def client_vectors(self, model: Any, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        self.calls += 1
        rows = []
        for cid in client_ids.tolist():
            x, y = self._data(root_seed, cid)
            rows.append(-self.lr * x.T @ (x @ model - y) / len(y))
        return self.scale * np.array(rows)

    def server_update(self, model: Any, decoded_sum: np.ndarray, participants: int, root_seed: int):
        model = model + decoded_sum / max(participants, 1)
        w_star = np.linspace(-1.0, 1.0, self.vector_dim)
        return model, {"distance": float(np.linalg.norm(model - w_star))}


class SampleLevelLinReg(LinearRegressionTask):
    """The same task with per-example gradients, so it can run DP-SGD steps (privacy.unit = "sample")."""

    def shard_size(self, root_seed: int) -> int:
        return 6

    def sample_vectors(self, model: Any, client_id: int, examples: np.ndarray, round: int, root_seed: int):
        x, y = self._data(root_seed, client_id)
        x, y = x[examples], y[examples]
        return x * (x @ model - y)[:, None]

    def local_update(self, model: Any, step_sum: np.ndarray, expected_batch: float) -> Any:
        return model - self.lr * step_sum / expected_batch


class NotATask:
    vector_dim = 4

    def init_model(self, root_seed: int) -> None:
        return None


class BadShapeTask(LinearRegressionTask):
    def client_vectors(self, model: Any, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        return np.zeros((len(client_ids), self.vector_dim + 1))


class NaNTask(LinearRegressionTask):
    def client_vectors(self, model: Any, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        out = super().client_vectors(model, client_ids, round, root_seed)
        out[0, 0] = math.nan
        return out


class BadDimTask(LinearRegressionTask):
    def __init__(self) -> None:
        super().__init__()
        self.vector_dim = 0


def _cfg(**sections: Any):
    base: dict[str, Any] = {
        "population": {"clients": 20, "checkin": 0.8, "dropout": 0.0},
        "secagg": {"bits": 24},
        "privacy": {"noise_multiplier": 0.5},
    }
    for k, v in sections.items():
        if isinstance(v, dict):
            base.setdefault(k, {}).update(v)
        else:
            base[k] = v
    return small_config(**base)


def _rounds(doc: dict[str, Any]) -> list[dict[str, Any]]:
    drop = {"seconds", "communication"}
    return [{k: v for k, v in r.items() if k not in drop} for r in doc["rounds"]]


def test_bundled_and_user_tasks_satisfy_the_protocol():
    assert isinstance(LinearRegressionTask(), Task) and not isinstance(LinearRegressionTask(), SampleLevelTask)
    assert isinstance(SampleLevelLinReg(), SampleLevelTask)
    assert isinstance(MeanTask(dim=4, clip=1.0), Task)
    assert isinstance(LogRegTask(n_clients=10, local_steps=1, sample_rate=0.5, learning_rate=1.0), SampleLevelTask)
    assert not isinstance(NotATask(), Task)


@pytest.mark.parametrize("mode", ["ideal", "crypto"])
def test_user_task_runs_and_repeats_bit_for_bit(tmp_path, mode):
    cfg = _cfg(mode=mode, rounds=3)
    a = run_scenario(cfg, tmp_path / "a", task=LinearRegressionTask(), accountant=CountingAccountant())
    b = run_scenario(cfg, tmp_path / "b", task=LinearRegressionTask(), accountant=CountingAccountant())
    assert a["status"] == "complete" and _rounds(a) == _rounds(b)
    dist = [r["metrics"]["distance"] for r in a["rounds"]]
    assert dist[-1] < math.sqrt(8 * 0.43), dist  # ||w*|| = 2.07 at w = 0: three gradient steps moved towards w*
    assert a["config"]["task"]["name"] == f"{LinearRegressionTask.__module__}:LinearRegressionTask"


def test_ideal_and_crypto_give_the_same_sum_for_a_user_task():
    cfg = _cfg()
    task = LinearRegressionTask()
    p = plan(cfg, 11, task)
    model = task.init_model(11)
    # per-client noise in the ideal aggregator (its default may draw the sum's noise as one draw: same law,
    # other bits), so both sums are equal bit for bit
    ideal = aggregate_round(cfg, p, 11, 1, model, InProcessExecutor(), "ideal", task, aggregate_noise=False)
    crypto = aggregate_round(cfg, p, 11, 1, model, InProcessExecutor(), "crypto", task)
    assert ideal.aggregate is not None and crypto.aggregate is not None
    assert ideal.aggregate.tolist() == crypto.aggregate.tolist()


def test_user_task_on_dask_matches_in_process(tmp_path):
    pytest.importorskip("distributed")
    from simulations.executors import DaskExecutor

    cfg = _cfg(rounds=2)
    task = LinearRegressionTask()
    p = plan(cfg, 11, task)
    model = task.init_model(11)
    local = run_scenario(cfg, tmp_path / "a", task=task, accountant=CountingAccountant())
    with DaskExecutor("", n_workers=2, processes=False) as ex:
        dist = run_scenario(cfg, tmp_path / "b", task=task, executor=ex, accountant=CountingAccountant())
        crypto = aggregate_round(cfg, p, 11, 1, model, ex, "crypto", task)
    assert _rounds(local) == _rounds(dist)
    ideal = aggregate_round(cfg, p, 11, 1, model, InProcessExecutor(), "ideal", task, aggregate_noise=False)
    assert crypto.aggregate is not None and ideal.aggregate is not None
    assert crypto.aggregate.tolist() == ideal.aggregate.tolist()


def test_rows_above_the_clip_are_clipped_and_the_certificate_is_unchanged(tmp_path):
    cfg = _cfg(rounds=2, privacy={"clip": 0.05, "noise_multiplier": 1e-3}, secagg={"bits": 40})
    big, small = LinearRegressionTask(scale=1000.0), LinearRegressionTask()
    model = big.init_model(11)
    rows = big.client_vectors(model, np.arange(20), 1, 11)
    assert np.linalg.norm(rows, axis=1).min() > 100 * 0.05  # the task really returns rows far above the clip
    p_big, p_small = plan(cfg, 11, big), plan(cfg, 11, small)
    assert p_big == p_small  # the codec and the sensitivities depend on the stated clip only
    ra = aggregate_round(cfg, p_big, 11, 1, model, InProcessExecutor(), "ideal", big)
    from simulations.clients import make_codec

    s = ra.spec
    decoded = make_codec(s.dim, s.bits, s.clip, s.scale, s.rotation_seed, s.beta).decode(ra.aggregate)
    k = len(ra.included)
    # each row clipped to c = 0.05 (and rounded within the codec's bound): the sum has norm <= K c, not ~K * 7;
    # the slack covers the rounding of K rows (Delta_2 / s each) and a noise std of 1e-3 c per coordinate
    expected = (rows / np.linalg.norm(rows, axis=1, keepdims=True) * 0.05)[ra.included].sum(axis=0)
    assert np.linalg.norm(decoded) <= k * 0.05 * 1.01
    assert np.linalg.norm(decoded - expected) < 0.01 * k * 0.05
    doc_big = run_scenario(cfg, tmp_path / "big", task=big)
    doc_small = run_scenario(cfg, tmp_path / "small", task=small)
    assert doc_big["privacy"]["epsilon"] == doc_small["privacy"]["epsilon"] > 0
    assert doc_big["privacy"]["server"]["epsilon"] == doc_small["privacy"]["server"]["epsilon"]


def test_sample_level_user_task_runs_the_steps_the_accountant_is_told(tmp_path):
    cfg = small_config(
        rounds=2,
        population={"clients": 20, "checkin": 0.8, "dropout": 0.0},
        secagg={"bits": 30},
        privacy={"noise_multiplier": 0.5, "unit": "sample"},
        task={"name": f"{HERE}:SampleLevelLinReg", "local_steps": 2, "sample_rate": 0.5},
    )
    task = SampleLevelLinReg()
    steps = []
    task.local_update = lambda model, step_sum, batch: steps.append(batch) or model - task.lr * step_sum / batch
    doc = run_scenario(cfg, tmp_path, task=task)
    assert doc["status"] == "complete"
    # the simulator ran S = 2 steps per participant (one local update between them) with batch q m = 3
    assert len(steps) == sum(r["checked_in"] for r in doc["rounds"]) and set(steps) == {3.0}
    priv = doc["privacy"]
    assert priv["unit"] == "sample" and priv["neighbouring"] == "add-remove"
    assert "S=2" in priv["event"] and "q=0.5" in priv["event"]
    # the scale rule budgets for S q m C: two steps of on average 3 clipped examples each
    assert doc["derived"]["signal_norm"] == pytest.approx(2 * 0.5 * 6 * cfg.privacy.clip)
    # the certificate is the local-steps event for exactly these S and q, built here from the library's
    # check-in pieces (not through the simulator's accountant); with S = 1 it would be smaller
    from secagg_dp.accounting.checkin.accountant import CheckinAccountant
    from secagg_dp.accounting.checkin.events import CheckinRound
    from secagg_dp.accounting.checkin.providers import checkin_provider
    from simulations.privacy import ORDERS

    d = doc["derived"]

    def eps(local_steps):
        prov = checkin_provider(
            "ddg", 20, sigma=d["sigma_int"], l2_sensitivity=d["l2_sensitivity"],
            l1_sensitivity=d["l1_sensitivity"], dim=d["padded_dim"], local_steps=local_steps, sample_rate=0.5,
        )  # fmt: skip
        event = CheckinRound(provider=prov, clients=20, gamma=0.8, sample_size=None, neighbouring="add-remove")
        acc = CheckinAccountant(priv["method"], "add-remove", orders=ORDERS, observer="analyst")
        return acc.compose(event, 2).certificate(1e-5).epsilon

    assert priv["epsilon"] == pytest.approx(eps(2), rel=1e-12) and eps(1) < eps(2)
    with pytest.raises(ParameterError, match="cannot run with privacy.unit = 'sample'"):
        plan(cfg, 11, LinearRegressionTask())


def test_task_named_by_import_path_with_options(tmp_path):
    cfg = small_config(rounds=1, task={"name": f"{HERE}:LinearRegressionTask", "options": {"dim": 5, "lr": 0.2}})
    doc = run_scenario(cfg, tmp_path, accountant=CountingAccountant())
    assert doc["derived"]["dim"] == 5 and "distance" in doc["rounds"][0]["metrics"]
    from simulations.config import build_config

    over = build_config({}, [f"task.name={HERE}:LinearRegressionTask", "task.options.dim=3", "mode=ideal"])
    assert over.task.options == {"dim": 3}
    with pytest.raises(ConfigError, match="task.dim"):
        build_config({}, [f"task.name={HERE}:LinearRegressionTask", "task.dim=3"])
    with pytest.raises(ConfigError, match="task.local_steps"):
        build_config({}, [f"task.name={HERE}:LinearRegressionTask", "task.local_steps=3"])


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (NotATask(), "is not a simulations.Task: it lacks client_vectors, server_update"),
        (BadDimTask(), "vector_dim must be an integer in"),
        (BadShapeTask(), r"client_vectors must return an array of shape \(3, 8\)"),
        (NaNTask(), "client_vectors returned 1 non-finite value"),
        (LinearRegressionTask(dim=True), "vector_dim must be an integer"),  # type: ignore[arg-type]
    ],
)
def test_malformed_task_is_refused_before_any_round(tmp_path, task, message):
    with pytest.raises(ParameterError, match=message) as info:
        run_scenario(_cfg(), tmp_path / "out", task=task, accountant=CountingAccountant())
    msg = str(info.value)
    assert "\n" not in msg and ("'linreg'" in msg or f"'{type(task).__name__}'" in msg), msg
    assert not (tmp_path / "out").exists()  # nothing written: no round ran


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_pkg.tasks:Task", "cannot import module 'no_such_pkg.tasks'"),
        (f"{HERE}:Missing", "has no attribute 'Missing'"),
        (f"{HERE}:NotATask", "is not a simulations.Task"),
        (f"{HERE}:BadShapeTask", "must return an array of shape"),
    ],
)
def test_cli_refuses_a_bad_task_in_one_line(tmp_path, capsys, name, message):
    from simulations.cli import main

    rc = main(["simulate", "--out", str(tmp_path / "o"), "--no-plots", "--no-progress", f"task.name={name}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o" / "results.json").exists()


def test_results_json_names_the_config_task(tmp_path):
    cfg = small_config(rounds=1, task={"name": f"{HERE}:LinearRegressionTask"})
    doc = run_scenario(cfg, tmp_path, accountant=CountingAccountant())
    disk = json.loads((tmp_path / "results.json").read_text())
    assert disk["config"]["task"]["name"] == doc["config"]["task"]["name"] == f"{HERE}:LinearRegressionTask"


def test_import_path_finds_a_module_in_the_current_folder(tmp_path, monkeypatch):
    # the secagg-dp script's folder is on sys.path, not the user's: load_task also looks in the current folder
    import sys

    from simulations.tasks.protocol import load_task

    (tmp_path / "usertask_cwd_probe.py").write_text(
        "class T:\n    def __init__(self, dim=2):\n        self.vector_dim = dim\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "usertask_cwd_probe", raising=False)
    assert load_task("usertask_cwd_probe:T", {"dim": 5}).vector_dim == 5
    with pytest.raises(ConfigError, match="task.options"):
        load_task("usertask_cwd_probe:T", {"width": 5})
    with pytest.raises(ConfigError, match="package.module:Class"):
        load_task("usertask_cwd_probe:", {})


class LateNaNTask(LinearRegressionTask):
    """Finite for the clients probed before the first round (0, 1, n - 1), NaN for client 5 in a round."""

    def client_vectors(self, model: Any, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        out = super().client_vectors(model, client_ids, round, root_seed)
        out[np.asarray(client_ids) == 5, 2] = math.inf
        return out


@pytest.mark.parametrize("mode", ["ideal", "crypto"])
def test_non_finite_rows_in_a_round_are_refused_with_the_tasks_message(tmp_path, mode):
    # In the ideal mode the rows' finiteness is read off their column sums (the block's truth sum), and the
    # task's own message comes from the full check only then; in the crypto mode the full check runs first.
    cfg = _cfg(mode=mode, population={"clients": 20, "checkin": 1.0})
    with pytest.raises(ParameterError, match="client_vectors returned 1 non-finite value") as info:
        run_scenario(cfg, tmp_path / "out", task=LateNaNTask(), accountant=CountingAccountant())
    assert "'linreg'" in str(info.value)
