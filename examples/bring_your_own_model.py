"""Bring your own model: a numpy task of yours through clipping, Z_q encoding, discrete noise, secure aggregation
and the check-in accountant, with no change to the package.

The task is federated logistic regression on synthetic data: client i holds 40 labelled points in 20
dimensions drawn from its own seed, with a client-specific shift of the features (non-IID). Each round a
participant runs 3 local gradient steps from the global model and returns its model change; the simulator
clips that row to C = 0.5 (whatever the task returns), encodes it onto Z_q with 18 bits, adds its share of
discrete Gaussian noise, sums the shares (``mode = "crypto"``: the full secure-aggregation protocol) and
charges the round to the privacy ledger; the server adds the decoded average change to the model. The
task is the class below: four members (``vector_dim``, ``init_model``, ``client_vectors``,
``server_update``), the :class:`simulations.Task` protocol. Guide: docs/bring-your-own-model.md.
Run: python examples/bring_your_own_model.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from simulations import Task
from simulations.config import build_config
from simulations.runner import run_scenario


class LogisticTask:
    """Binary logistic regression; every client's data is a function of (root seed, client id) only."""

    name = "logistic"

    def __init__(self, features: int = 20, local_steps: int = 3, lr: float = 1.0) -> None:
        self.features, self.local_steps, self.lr = features, local_steps, lr
        self.vector_dim = features + 1  # weights and bias: the length of every client's update row

    def _points(self, root_seed: int, key: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        truth = np.random.default_rng(root_seed).standard_normal(self.features)  # the common labelling rule
        rng = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(key,)))
        x = rng.standard_normal((n, self.features)) + 0.5 * rng.standard_normal(self.features)  # client shift
        y = (x @ truth + 0.3 * rng.standard_normal(n) > 0).astype(float)
        return np.hstack([x, np.ones((n, 1))]), y

    def init_model(self, root_seed: int) -> np.ndarray:
        return np.zeros(self.vector_dim)

    def client_vectors(self, model: np.ndarray, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        rows = np.empty((len(client_ids), self.vector_dim))
        for row, cid in zip(rows, client_ids.tolist(), strict=True):
            x, y = self._points(root_seed, cid, 40)
            w = model.copy()
            for _ in range(self.local_steps):
                w -= self.lr * x.T @ (1.0 / (1.0 + np.exp(-x @ w)) - y) / len(y)
            row[:] = w - model  # the update before clipping: the simulator clips it
        return rows

    def server_update(
        self, model: np.ndarray, decoded_sum: np.ndarray, participants: int, root_seed: int
    ) -> tuple[np.ndarray, dict[str, float]]:
        model = model + decoded_sum / max(participants, 1)
        x, y = self._points(root_seed, 10**6, 2000)  # held-out points (a key no client uses)
        return model, {"accuracy": float(np.mean((x @ model > 0) == (y > 0.5)))}


SCENARIO = {
    "name": "bring-your-own-model",
    "mode": "crypto",
    "rounds": 8,
    "seed": 3,
    "population": {"clients": 60, "checkin": 0.5, "dropout": 0.0},
    "secagg": {"bits": 18},
    "privacy": {"mechanism": "ddg", "clip": 0.5, "noise_multiplier": 4.0, "delta": 1e-5},
}


def main(out_dir: Path) -> dict:
    task = LogisticTask()
    assert isinstance(task, Task)  # structural: no base class, just the four members
    cfg = build_config(SCENARIO)
    start = task.server_update(task.init_model(cfg.seed), np.zeros(task.vector_dim), 1, cfg.seed)[1]["accuracy"]
    doc = run_scenario(cfg, out_dir, task=task)
    acc = [r["metrics"]["accuracy"] for r in doc["rounds"]]
    priv = doc["privacy"]
    print(
        f"task {doc['config']['task']['name']}: vector_dim {doc['derived']['dim']}, "
        f"{cfg.rounds} rounds, mode {cfg.mode}"
    )
    print(f"accuracy before training {start:.3f}, after each round: {' '.join(f'{a:.3f}' for a in acc)}")
    print(f"clip C = {cfg.privacy.clip} enforced by the simulator; noise multiplier z = {cfg.privacy.noise_multiplier}")
    print(
        f"certified epsilon = {priv['epsilon']:.4f} at delta = {priv['delta']:g} "
        f"({priv['unit']} level, {priv['neighbouring']})"
    )
    print(f"  against the secure-aggregation server: epsilon = {priv['server']['epsilon']:.4f}")
    print(f"results: {Path(out_dir) / 'results.json'}")
    if doc["status"] != "complete" or acc[-1] < start + 0.2:
        raise SystemExit(f"the model did not learn: {start:.3f} -> {acc[-1]:.3f} ({doc['status']})")
    return doc


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
