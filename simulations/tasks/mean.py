"""Distributed mean estimation (Kairouz, Liu & Steinke 2021, Sec. 6 setting).

Client i holds x_i = c * (mu + g_i) / ||mu + g_i||, with a common unit direction mu and
g_i ~ N(0, I/d), both drawn from the root seed: ||x_i|| = c, so clipping never changes the data and the
target is known exactly. Computed as c * (sqrt(d) mu + z_i) / ||sqrt(d) mu + z_i|| with z_i = sqrt(d) g_i
the client's standard normals (the same vector; fewer passes).

Data stream (public synthetic input, no secrecy needed): SplitMix64 (Steele, Lea & Flood 2014, "Fast
splittable pseudorandom number generators", OOPSLA; the ``splitmix64.c`` output function of Vigna) keyed
by ``SeedSequence(root, spawn_key=(0, 1))``, used counter-based: word k of the stream is
mix(key + (k + 1) * gamma) mod 2^64, and client i owns words i * W .. i * W + W - 1, W = 2h, h = ceil(d / 4)
(disjoint windows while (i + 1) * W <= 2^64), so its vector depends on the root seed and its id only, and a
block of clients is one vectorised computation. Each word gives two 24-bit uniforms u = (half >> 8) / 2^24
(low 32-bit half first); the window's first h words give 2h radii r = sqrt(-2 ln(u + 2^-24)), its last h
words 2h angles t = 2 pi u, and z = (r cos t, r sin t) (Box & Muller 1958, in float32), of which the first d
values are kept: standard normal up to the 2^-24 resolution of the uniforms (|z| <= 5.77; the tail beyond,
probability 8e-9 per value, is cut). The transcendental functions are numpy's, which may differ in the last
bit between CPUs and numpy builds (as the rotation's BLAS products already do). The server estimates the mean
of the survivors' vectors as decode(sum) / K and reports MSE = ||estimate - true mean||^2 / d.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["MeanTask", "client_vector", "client_vectors", "client_normals", "splitmix64_words"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment (odd: the stream has period 2^64)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


@functools.lru_cache(maxsize=8)
def _direction(root_seed: int, dim: int) -> np.ndarray:
    mu = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(0, 0))).standard_normal(dim)
    mu /= np.linalg.norm(mu)
    mu.setflags(write=False)
    return mu


@functools.lru_cache(maxsize=8)
def _direction_scaled(root_seed: int, dim: int) -> np.ndarray:
    mu: np.ndarray = _direction(root_seed, dim) * np.sqrt(dim)
    mu.setflags(write=False)
    return mu


@functools.lru_cache(maxsize=8)
def _data_key(root_seed: int) -> int:
    return int(np.random.SeedSequence(root_seed, spawn_key=(0, 1)).generate_state(1, np.uint64)[0])


@functools.lru_cache(maxsize=8)
def _offsets(width: int, parts: int) -> np.ndarray:
    """(s * width / parts + j) * gamma mod 2^64 for part s < parts and j < width / parts (shape (parts, 1, w))."""
    offs = (np.arange(width, dtype=np.uint64) * _GAMMA).reshape(parts, 1, width // parts)
    offs.setflags(write=False)
    return offs


def _mix_inplace(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Stafford's "Mix13") applied in place to the uint64 array ``z``."""
    tmp = np.empty_like(z)
    np.right_shift(z, _S30, out=tmp)
    z ^= tmp
    z *= _MIX1
    np.right_shift(z, _S27, out=tmp)
    z ^= tmp
    z *= _MIX2
    np.right_shift(z, _S31, out=tmp)
    z ^= tmp
    return z


def _window_words(key: int, client_ids: npt.ArrayLike, width: int, parts: int) -> np.ndarray:
    """Each client's window of ``width`` words cut into ``parts`` equal runs, run-major: shape
    (parts, len(ids), width / parts), [s, i, j] = word ids[i] * width + s * width / parts + j of the stream."""
    ids = np.asarray(client_ids, dtype=np.int64).reshape(-1).astype(np.uint64)
    start = (ids * np.uint64(width) + np.uint64(1)) * _GAMMA + np.uint64(key)  # wraps mod 2^64
    return _mix_inplace(np.add(start[None, :, None], _offsets(width, parts)))


def splitmix64_words(key: int, client_ids: npt.ArrayLike, width: int) -> np.ndarray:
    """Words i * width .. i * width + width - 1 of the SplitMix64 stream seeded with ``key``, one row per id
    (uint64, shape (len(ids), width)): word k is mix(key + (k + 1) * gamma) mod 2^64."""
    words: np.ndarray = _window_words(key, client_ids, width, 1)[0]
    return words


def _box_muller(root_seed: int, client_ids: npt.ArrayLike, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(r cos t, r sin t) of each client, two float32 arrays of shape (len(ids), 2 * ceil(dim / 4)).

    The radius words and the angle words of all the clients are computed as two contiguous arrays, so that
    every step is one flat pass."""
    h = (dim + 3) // 4
    words = _window_words(_data_key(root_seed), client_ids, 2 * h, 2)  # [0]: radius words, [1]: angle words
    if sys.byteorder == "little":
        halves = words.view(np.uint32)  # (2, n, 2h): low half of word j at 2j, high half at 2j + 1
    else:  # the same order on a big-endian platform
        low, high = (words & np.uint64(0xFFFFFFFF)).astype(np.uint32), (words >> np.uint64(32)).astype(np.uint32)
        halves = np.stack([low, high], axis=-1).reshape(words.shape[:-1] + (-1,))
    halves >>= np.uint32(8)
    u = halves.astype(np.float32)  # exact: below 2^24
    r, t = u[0], u[1]
    r += np.float32(1.0)
    r *= np.float32(2.0**-24)  # (k + 1) / 2^24 in (0, 1], exact
    np.log(r, out=r)
    r *= np.float32(-2.0)
    np.sqrt(r, out=r)
    t *= np.float32(2.0 * np.pi * 2.0**-24)
    c = np.cos(t)
    np.sin(t, out=t)
    c *= r
    t *= r
    return c, t


def client_normals(root_seed: int, client_ids: npt.ArrayLike, dim: int) -> np.ndarray:
    """The clients' standard normals z_i (float32, shape (len(ids), 4 * ceil(dim / 4)); the first ``dim``
    columns are used): Box-Muller on the 24-bit uniforms of each client's window (see the module docstring)."""
    return np.concatenate(_box_muller(root_seed, client_ids, dim), axis=1)


_VECDOT = getattr(np, "vecdot", None)


def _row_sq(a: np.ndarray) -> np.ndarray:
    """Σ_j a_ij² per row (``numpy.vecdot`` where numpy has it, else ``einsum``)."""
    out: np.ndarray = _VECDOT(a, a) if _VECDOT is not None else np.einsum("ij,ij->i", a, a)
    return out


#: Clients per pass of :func:`client_vectors`: its work arrays (about 128 KB each at d = 1000) stay in a
#: core's L2 cache.
_PASS_ROWS = 64


def client_vectors(root_seed: int, client_ids: npt.ArrayLike, dim: int, clip: float) -> np.ndarray:
    """The data vectors of ``client_ids`` as rows (each a deterministic function of the root seed and the id)."""
    ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
    mu = _direction_scaled(root_seed, dim)
    v = np.empty((len(ids), dim))
    for lo in range(0, len(ids), _PASS_ROWS):
        part = v[lo : lo + _PASS_ROWS]
        cos, sin = _box_muller(root_seed, ids[lo : lo + _PASS_ROWS], dim)
        k = min(cos.shape[1], dim)
        np.copyto(part[:, :k], cos[:, :k])  # z_i = (r cos t, r sin t)[:d], as float64
        np.copyto(part[:, k:], sin[:, : dim - k])
        # c·(mu + g/√d)/‖mu + g/√d‖ = c·(√d·mu + g)/‖√d·mu + g‖: three passes instead of six
        part += mu
        part *= (clip / np.sqrt(_row_sq(part)))[:, None]
    return v


def client_vector(root_seed: int, client_id: int, dim: int, clip: float) -> np.ndarray:
    """The data vector of one client (a deterministic function of the root seed and the id)."""
    row: np.ndarray = client_vectors(root_seed, [client_id], dim, clip)[0]
    return row


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
