"""Distributed mean estimation (Kairouz, Liu & Steinke 2021, Sec. 6 setting).

Client i holds x_i = c * (mu + g_i) / ||mu + g_i||, with a common unit direction mu and
g_i ~ N(0, I/d), both drawn from the root seed: ||x_i|| = c, so clipping never changes the data and the
target is known exactly. Computed as c * (sqrt(d) mu + z_i) / ||sqrt(d) mu + z_i|| with z_i = sqrt(d) g_i
the client's standard normals (the same vector; fewer passes).
Data stream: one PCG64 keyed by ``SeedSequence(root, spawn_key=(0, 1))``;
client i reads ``standard_normal(d)`` from that stream advanced by i * 2^70 draws (disjoint windows for
any d < 2^69), so a batch of clients costs one state reset per client instead of one seeding. The data
set is public synthetic input (no secrecy needed), hence PCG64 here whatever the simulation generator. The server
estimates the mean of the survivors' vectors as decode(sum) / K and reports MSE = ||estimate - true mean||^2 / d.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the state dict's type lives in numpy's stubs only
    from numpy.random._pcg64 import _PCG64State

__all__ = ["MeanTask", "client_vector", "client_vectors", "DATA_STRIDE"]

DATA_STRIDE = 1 << 70  # draws between the starts of two consecutive clients' data windows


@functools.lru_cache(maxsize=8)
def _direction(root_seed: int, dim: int) -> np.ndarray:
    mu = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(0, 0))).standard_normal(dim)
    mu /= np.linalg.norm(mu)
    mu.setflags(write=False)
    return mu


@functools.lru_cache(maxsize=8)
def _direction_scaled(root_seed: int, dim: int) -> np.ndarray:
    mu = _direction(root_seed, dim) * np.sqrt(dim)
    mu.setflags(write=False)
    return mu


@functools.lru_cache(maxsize=8)
def _data_state(root_seed: int) -> _PCG64State:
    return np.random.PCG64(np.random.SeedSequence(root_seed, spawn_key=(0, 1))).state


def client_vectors(root_seed: int, client_ids, dim: int, clip: float) -> np.ndarray:  # noqa: ANN001
    """The data vectors of ``client_ids`` as rows (each a deterministic function of the root seed and the id)."""
    ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
    base = _data_state(root_seed)
    bg = np.random.PCG64()
    gen = np.random.Generator(bg)
    v = np.empty((len(ids), dim))
    for row, cid in zip(v, ids.tolist(), strict=True):
        bg.state = base
        bg.advance(cid * DATA_STRIDE)
        gen.standard_normal(out=row)
    # c·(mu + g/√d)/‖mu + g/√d‖ = c·(√d·mu + g)/‖√d·mu + g‖: three passes over the block instead of six
    v += _direction_scaled(root_seed, dim)
    v *= (clip / np.sqrt(np.einsum("ij,ij->i", v, v)))[:, None]
    return v


def client_vector(root_seed: int, client_id: int, dim: int, clip: float) -> np.ndarray:
    """The data vector of one client (a deterministic function of the root seed and the id)."""
    return client_vectors(root_seed, [client_id], dim, clip)[0]


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

    def client_vectors(self, model: object, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        """The clients' data vectors (norm c each; the same every round)."""
        return client_vectors(root_seed, client_ids, self.dim, self.clip)

    def server_update(
        self, model: np.ndarray | None, decoded_sum: np.ndarray, participants: int, root_seed: int
    ) -> tuple[np.ndarray | None, dict[str, float]]:
        """Nothing to update: the metric needs the true sum (:meth:`truth_metrics`)."""
        return model, {}

    def truth_metrics(self, decoded_sum: np.ndarray, truth_sum: np.ndarray, participants: int) -> dict[str, float]:
        """MSE = ||decode(sum)/K - (true sum)/K||^2 / d over the ``participants`` = K survivors' data."""
        k = max(participants, 1)
        return {"mse": float(np.mean((decoded_sum / k - truth_sum / k) ** 2))}
