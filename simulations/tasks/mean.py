"""Distributed mean estimation (Kairouz, Liu & Steinke 2021, Sec. 6 setting).

Client i holds x_i = c * (mu + g_i) / ||mu + g_i||, with a common unit direction mu and
g_i ~ N(0, I/d), both drawn from the root seed: ||x_i|| = c, so clipping never changes the data and the
target is known exactly. The server estimates the mean of the survivors' vectors as decode(sum) / K and
reports MSE = ||estimate - true mean||^2 / d.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["MeanTask", "client_vector"]


@functools.lru_cache(maxsize=8)
def _direction(root_seed: int, dim: int) -> np.ndarray:
    mu = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(0, 0))).standard_normal(dim)
    mu /= np.linalg.norm(mu)
    mu.setflags(write=False)
    return mu


def client_vector(root_seed: int, client_id: int, dim: int, clip: float) -> np.ndarray:
    """The data vector of one client (a deterministic function of the root seed and the id)."""
    mu = _direction(root_seed, dim)
    rng = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(0, 1, client_id)))
    v = mu + rng.standard_normal(dim) / np.sqrt(dim)
    return clip * v / np.linalg.norm(v)


@dataclass(frozen=True)
class MeanTask:
    dim: int
    clip: float
    name: str = "mean"
    metric: str = "mse"

    @property
    def vector_dim(self) -> int:
        return self.dim

    def init_model(self, root_seed: int) -> np.ndarray | None:
        return None  # nothing to train: each round is an independent mean estimate

    def server_update(self, model, decoded_sum: np.ndarray, survivors: int, truth_sum: np.ndarray | None, root_seed: int):
        """Return (model, metrics) for one round from the decoded sum of ``survivors`` clients."""
        k = max(survivors, 1)
        estimate = decoded_sum / k
        metrics = {"mse": float(np.mean((estimate - truth_sum / k) ** 2))}
        return model, metrics
