"""The example's model and data: federated least squares on synthetic data, one partition per Flower node.

Pure numpy, no download: partition p's data is drawn from ``numpy.random.default_rng([data_seed, p])`` around one
true weight vector, so the ServerApp, the ClientApp and the test can all recompute it.
"""

from __future__ import annotations

import numpy as np

DIM = 10  # model: weights of a linear model (flattened update length)
SAMPLES = 32  # examples per partition
LEARNING_RATE = 0.1
LOCAL_STEPS = 2


def partition(p: int, data_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Partition ``p``'s features and targets."""
    truth = np.random.default_rng([data_seed, 10**6]).normal(size=DIM)
    rng = np.random.default_rng([data_seed, p])
    x = rng.normal(size=(SAMPLES, DIM)) + 0.2 * p  # non-IID: the feature mean moves with the partition
    return x, x @ truth + 0.1 * rng.normal(size=SAMPLES)


def local_train(w: np.ndarray, p: int, data_seed: int = 0) -> np.ndarray:
    """``LOCAL_STEPS`` full-batch gradient steps on partition ``p``'s squared loss, from the global ``w``."""
    x, y = partition(p, data_seed)
    w = np.array(w, dtype=np.float64, copy=True)
    for _ in range(LOCAL_STEPS):
        w -= LEARNING_RATE * x.T @ (x @ w - y) / len(y)
    return w


def loss(w: np.ndarray, partitions: int, data_seed: int = 0) -> float:
    """Mean squared error over every partition's data."""
    parts = [partition(p, data_seed) for p in range(partitions)]
    return float(np.mean([np.mean((x @ w - y) ** 2) for x, y in parts]))
