"""The numpy MLP workload: its backpropagation against finite differences, its non-IID split, and a tiny
federated run that learns."""

from __future__ import annotations

import numpy as np
import pytest

from simulations import Task
from simulations.tasks.mlp import MLPTask, digits_dirichlet_split, loss_and_grad
from tests.simulations.conftest import CountingAccountant, small_config

pytest.importorskip("sklearn")


def test_gradient_matches_central_finite_differences():
    # oracle: (L(theta + h e_i) - L(theta - h e_i)) / 2h, error O(h^2) ~ 1e-10 for this smooth (tanh) loss
    rng = np.random.default_rng(0)
    task = MLPTask(clients=4, hidden=5)
    theta = task.init_model(0) + 0.1 * rng.standard_normal(task.vector_dim)
    x, y = rng.random((7, 64)), rng.integers(0, 10, 7)
    _, g = loss_and_grad(theta, x, y, 5)
    h = 1e-5
    for i in rng.choice(task.vector_dim, size=40, replace=False):
        e = np.zeros(task.vector_dim)
        e[i] = h
        fd = (loss_and_grad(theta + e, x, y, 5)[0] - loss_and_grad(theta - e, x, y, 5)[0]) / (2 * h)
        assert abs(fd - g[i]) < 1e-7, (i, fd, g[i])


def test_dirichlet_split_is_a_partition_with_label_skew():
    shards, x_train, y_train, x_test, y_test = digits_dirichlet_split(0, 50, 0.5)
    everything = np.concatenate(shards)
    assert len(everything) == len(np.unique(everything)) == len(y_train) == 1797 - 359 and len(y_test) == 359
    # label skew: mean total-variation distance of a client's label histogram from the global one, against the
    # same statistic for a uniformly random split into shards of the same sizes (0.48 vs 0.23 measured)
    glob = np.bincount(y_train, minlength=10) / len(y_train)

    def tv(parts):
        return np.mean(
            [0.5 * np.abs(np.bincount(y_train[s], minlength=10) / len(s) - glob).sum() for s in parts if len(s)]
        )

    perm = np.random.default_rng(1).permutation(len(y_train))
    iid = np.split(perm, np.cumsum([len(s) for s in shards])[:-1])
    assert tv(shards) > 1.6 * tv(iid)
    assert digits_dirichlet_split(0, 50, 0.5)[0][3].tolist() == shards[3].tolist()  # a function of the seed


def test_mlp_task_is_a_task_and_refuses_unknown_clients():
    task = MLPTask(clients=10)
    assert isinstance(task, Task) and task.vector_dim == 64 * 32 + 32 + 32 * 10 + 10
    from secagg_dp.errors import ParameterError

    with pytest.raises(ParameterError, match="task.options.clients"):
        task.client_vectors(task.init_model(0), np.array([10]), 1, 0)
    with pytest.raises(ParameterError, match="hidden"):
        MLPTask(hidden=0)


def test_a_tiny_federated_run_learns(tmp_path):
    cfg = small_config(
        rounds=6,
        population={"clients": 30, "checkin": 0.8},
        secagg={"bits": 24},
        privacy={"noise_multiplier": 0.05, "clip": 2.0},
        task={"name": "simulations.tasks.mlp:MLPTask", "options": {"clients": 30, "hidden": 16}},
    )
    task = MLPTask(clients=30, hidden=16)
    before = task.evaluate(task.init_model(cfg.seed), cfg.seed)["accuracy"]
    from simulations.runner import run_scenario

    doc = run_scenario(cfg, tmp_path, accountant=CountingAccountant())
    run = [r["metrics"]["accuracy"] for r in doc["rounds"]]
    # chance is 0.1 on ten classes; six rounds of weakly noised FedAvg reach well above it
    assert before < 0.25 and run[-1] > 0.6, (before, run)
