"""The tasks learn something with weak noise, and the digits data never touches the network."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from simulations.runner import run_scenario
from tests.simulations.conftest import small_config


def test_digits_load_offline(monkeypatch):
    from simulations.tasks import logreg

    logreg._digits.cache_clear()
    logreg.load_digits_partition.cache_clear()

    def no_network(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    x_train, y_train, x_test, y_test = logreg.load_digits_partition(0, 50)
    assert x_train.shape == (50, 28, 65) and len(y_test) == 359
    assert set(np.unique(y_train)) == set(range(10))


def test_per_sample_gradient_matches_finite_differences():
    from simulations.tasks.logreg import _loss, per_sample_gradients

    rng = np.random.default_rng(0)
    w = rng.normal(size=650) * 0.1
    x = np.hstack([rng.random((1, 64)), np.ones((1, 1))])
    y = np.array([3])
    g = per_sample_gradients(w, x, y)[0]
    idx = rng.choice(650, size=10, replace=False)
    h = 1e-6
    for i in idx:
        e = np.zeros(650)
        e[i] = h
        fd = (_loss(w + e, x, y) - _loss(w - e, x, y)) / (2 * h)
        assert abs(fd - g[i]) < 1e-6


@pytest.mark.parametrize("unit", ["client", "sample"])
def test_logreg_learns_above_chance_with_weak_noise(tmp_path, counting_accountant, unit):
    # chance is 0.1 on 10 balanced classes; a wrong gradient sign or scale leaves accuracy near it
    # (unit "client": clipped model update noised once; "sample": per-sample DP-SGD steps)
    cfg = small_config(
        rounds=6,
        population={"clients": 40, "checkin": 0.8},
        privacy={"noise_multiplier": 0.05, "unit": unit},
        secagg={"bits": 28},
        task={"name": "logreg", "local_steps": 2, "sample_rate": 0.5, "learning_rate": 2.0},
    )
    doc = run_scenario(cfg, tmp_path, accountant=counting_accountant)
    accs = [r["metrics"]["accuracy"] for r in doc["rounds"]]
    assert accs[-1] > 0.6, accs


def test_mean_estimation_error_grows_with_noise(tmp_path, counting_accountant):
    mses = []
    for z in (0.1, 10.0):
        cfg = small_config(rounds=2, privacy={"noise_multiplier": z}, secagg={"bits": 30}, task={"dim": 64})
        doc = run_scenario(cfg, tmp_path / str(z), accountant=type(counting_accountant)())
        mses.append(np.mean([r["metrics"]["mse"] for r in doc["rounds"]]))
    # expected MSE ~ z^2 c^2 / (K^2) per coordinate-ish; 100x in z is ~1e4x in MSE, far beyond noise
    assert mses[0] < 1e-3 and mses[1] > 100 * mses[0], mses
