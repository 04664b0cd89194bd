"""Client-side work of one round, as pure picklable functions (run in-process or on Dask workers).

The participants of a round (sorted ids) are cut into fixed blocks of ``BLOCK`` clients; each block's
randomness (data sampling, randomized rounding, DP noise) comes from its own generator keyed by
(root seed, round, block index) through ``np.random.SeedSequence`` spawn keys, and a block is encoded as
one vectorised batch. The result does not depend on which worker runs which block or in which order. These generators are
simulation generators chosen for reproducibility; masks and keys never come from them (they come from
the protocol's keyed cryptographic streams).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from secagg_dp import zq

__all__ = ["RoundSpec", "block_rng", "blocks_of", "BLOCK", "make_codec", "draw_noise", "run_blocks", "client_truth"]

# spawn-key purposes under (1, round, purpose[, client]) — documented in results.json "seeds"
PURPOSE_CHECKIN, PURPOSE_DROPOUT, PURPOSE_ROTATION, PURPOSE_CRYPTO, PURPOSE_CLIENT = 0, 1, 2, 3, 4
BLOCK = 64  # participants per randomness block (vectorised encode); independent of the executor


@dataclass(frozen=True)
class RoundSpec:
    """Everything a participant needs in round ``round`` (public parameters plus the current model)."""

    task: str
    round: int
    root_seed: int
    n_clients: int
    dim: int
    bits: int
    clip: float
    scale: float
    rotation_seed: int
    beta: float
    mechanism: str
    sigma_int: float  # per-client, per-step noise std on the integer grid
    local_steps: int = 1
    sample_rate: float = 1.0
    learning_rate: float = 1.0
    model: np.ndarray | None = None
    unit: str = "client"  # logreg: "client" (clip the update, noise once) or "sample" (DP-SGD steps)


@functools.lru_cache(maxsize=16)
def make_codec(dim: int, bits: int, clip: float, scale: float, rotation_seed: int, beta: float):  # noqa: ANN201
    from secagg_dp.quantize import ZqCodec

    return ZqCodec(dim, bits, clip, scale, rotation_seed=rotation_seed, beta=beta)


def block_rng(root_seed: int, round_: int, block: int) -> np.random.Generator:
    """The generator of one block of participants (rounding, noise, local sampling)."""
    return np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(1, round_, PURPOSE_CLIENT, block)))


def blocks_of(ids: list[int], size: int = BLOCK) -> list[tuple[int, list[int]]]:
    """Split the sorted participant list into fixed blocks (index, ids): the unit of randomness and of work."""
    return [(b, ids[i : i + size]) for b, i in enumerate(range(0, len(ids), size))]


def draw_noise(mechanism: str, sigma_int: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """One client's int64 noise: discrete Gaussian N_Z(0, sigma^2) or symmetric Skellam of variance sigma^2."""
    from secagg_dp.noise import sample_discrete_gaussian, sample_skellam

    if mechanism == "ddg":
        return sample_discrete_gaussian(sigma_int, size, rng=rng)
    return sample_skellam(sigma_int**2, size, rng=rng)


def _encode_mean(spec: RoundSpec, codec, ids: list[int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    from simulations.tasks.mean import client_vector

    x = np.stack([client_vector(spec.root_seed, cid, spec.dim, spec.clip) for cid in ids])
    noise = draw_noise(spec.mechanism, spec.sigma_int, len(ids) * codec.padded_dim, rng).reshape(len(ids), -1)
    return codec.encode(x, noise=noise, rng=rng), x


def _encode_logreg_client(spec: RoundSpec, codec, cid: int, rng: np.random.Generator) -> np.ndarray:
    from simulations.tasks.logreg import load_digits_partition, per_sample_gradients

    xs, ys, _, _ = load_digits_partition(spec.root_seed, spec.n_clients)
    x, y = xs[cid], ys[cid]
    m = len(y)
    w = np.array(spec.model, dtype=np.float64, copy=True)
    if spec.unit == "client":
        # DP-FedAvg: S plain local steps, then the whole update is clipped to C (by the codec) and noised once.
        for _ in range(spec.local_steps):
            chosen = rng.random(m) < spec.sample_rate
            if chosen.any():
                w -= spec.learning_rate * per_sample_gradients(w, x[chosen], y[chosen]).sum(axis=0) / (spec.sample_rate * m)
        noise = draw_noise(spec.mechanism, spec.sigma_int, codec.padded_dim, rng)
        return codec.encode(w - spec.model, noise=noise, rng=rng)
    total = np.zeros(codec.padded_dim, dtype=np.uint64)
    for step in range(spec.local_steps):
        chosen = rng.random(m) < spec.sample_rate  # Poisson sampling inside the client
        vec = zq.wrap_int64(draw_noise(spec.mechanism, spec.sigma_int, codec.padded_dim, rng), spec.bits)
        if chosen.any():
            # each sample is clipped to C and rounded on its own, so one sample moves vec by <= Delta_2
            grads = per_sample_gradients(w, x[chosen], y[chosen])
            vec = zq.add_mod(vec, zq.sum_mod(codec.encode(grads, rng=rng), spec.bits), spec.bits)
        if step + 1 < spec.local_steps:
            w -= spec.learning_rate * codec.decode(vec) / (spec.sample_rate * m)
        total = zq.add_mod(total, vec, spec.bits)
    return total


def run_blocks(
    spec: RoundSpec, blocks: list[tuple[int, list[int]]], included: frozenset[int] | None = None
) -> tuple[list[int], np.ndarray, list[tuple[int, np.ndarray]] | None]:
    """Encode (and noise) the participants of the given blocks.

    With ``included`` (ideal aggregator) returns ``(ids, partial, truths)`` where ``partial`` is the exact
    modular sum of the included clients' vectors and ``truths`` lists (block, plain float sum of the
    included clients' mean-estimation data) to score the estimate (empty for logreg); without it returns
    one uint64 row per client (input of the secure-aggregation protocol) and None.
    """
    codec = make_codec(spec.dim, spec.bits, spec.clip, spec.scale, spec.rotation_seed, spec.beta)
    ids_out: list[int] = []
    rows: list[np.ndarray] = []
    acc = np.zeros(codec.padded_dim, dtype=np.uint64)
    truths: list[tuple[int, np.ndarray]] = []  # per block, so the caller can sum in a fixed order
    for block, ids in blocks:
        rng = block_rng(spec.root_seed, spec.round, block)
        if spec.task == "mean":
            vecs, x = _encode_mean(spec, codec, ids, rng)
        else:
            vecs, x = np.stack([_encode_logreg_client(spec, codec, cid, rng) for cid in ids]), None
        ids_out.extend(ids)
        if included is None:
            rows.append(vecs)
            continue
        keep = np.fromiter((cid in included for cid in ids), dtype=bool, count=len(ids))
        acc += vecs[keep].sum(axis=0, dtype=np.uint64)  # wraps mod 2^64; q divides 2^64, reduced below
        if x is not None:
            truths.append((block, x[keep].sum(axis=0)))
    if included is not None:
        return ids_out, acc & np.uint64((1 << spec.bits) - 1), truths
    out = np.concatenate(rows) if rows else np.zeros((0, codec.padded_dim), dtype=np.uint64)
    return ids_out, out, None


def client_truth(spec: RoundSpec, ids: list[int]) -> np.ndarray | None:
    """Plain sum of the mean-estimation data of ``ids`` (None for logreg)."""
    if spec.task != "mean":
        return None
    from simulations.tasks.mean import client_vector

    total = np.zeros(spec.dim)
    for cid in ids:
        total += client_vector(spec.root_seed, cid, spec.dim, spec.clip)
    return total
