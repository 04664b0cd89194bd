"""Client-side work of one round, as pure picklable functions (run in-process or on Dask workers).

The participants of a round (sorted ids, an int64 array) are cut into fixed blocks of ``BLOCK`` clients;
each block's randomness (randomized rounding, DP noise, local sampling) comes from its own generator keyed
by (root seed, round, block index) through ``np.random.SeedSequence`` spawn keys: AES-128 in counter mode
(randomgen ``AESCounter``, cryptographically strong) by default, PCG64 when the config asks for
``rng = "pcg64"``. A block is encoded as one vectorised batch; ``CHUNK`` consecutive blocks form one unit
of work (one Dask task), fixed independently of the executor, so the result does not depend on which
worker runs which chunk. Masks and keys never come from these generators (they come from the protocol's
keyed cryptographic streams).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from secagg_dp import zq
from secagg_dp._validate import all_finite
from secagg_dp.errors import ParameterError

__all__ = [
    "RoundSpec",
    "Block",
    "block_rng",
    "noise_rng",
    "blocks_of",
    "chunks_of",
    "BLOCK",
    "CHUNK",
    "GENERATORS",
    "make_codec",
    "draw_noise",
    "run_blocks",
    "BlockInputs",
    "block_inputs",
    "tune_allocator",
    "client_truth",
    "noise_master",
    "noise_schedule",
    "wants_truth",
]

# spawn-key purposes under (1, round, purpose[, client]) — documented in results.json "seeds"
PURPOSE_CHECKIN, PURPOSE_DROPOUT, PURPOSE_ROTATION, PURPOSE_CRYPTO, PURPOSE_CLIENT, PURPOSE_NOISE = 0, 1, 2, 3, 4, 5
BLOCK = 128  # participants per randomness block (one vectorised encode, ~1 MB arrays at d = 1024)
CHUNK = 32  # consecutive blocks per unit of work (one Dask task, one partial sum); independent of the executor
GENERATORS = ("aes-counter", "pcg64")

#: One block: (index, participant ids, which of them are included in the sum — None: return every row).
Block = tuple[int, np.ndarray, "np.ndarray | None"]


@dataclass(frozen=True)
class RoundSpec:
    """Everything a participant needs in round ``round`` (public parameters plus the current model)."""

    task: Any  # the round's task object (simulations.Task): it turns the model into update rows
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
    model: Any = None
    unit: str = "client"  # "client" (clip the update, noise once) or "sample" (DP-SGD steps, a SampleLevelTask)
    generator: str = "aes-counter"  # the block generator: "aes-counter" | "pcg64"
    # False: the clients encode without noise and the ideal aggregator adds the sum of the included clients'
    # noise as one draw (simulations.runner.aggregate_round; secagg_dp.noise.aggregate)
    client_noise: bool = True
    # add-then-remove noise (privacy.noise_enforcement): the round's schedule (target variance in the sum,
    # roster size N, tolerance) and the groups whose components stay in the client's own vector: the groups
    # kept after removal (ideal mode: the removal is applied here), or () (crypto mode: the protocol client
    # adds every group and the server removes them). None: no enforcement.
    enforcement: tuple[float, int, float] | None = None
    kept_groups: tuple[int, ...] = ()
    noise_seed: int = 0  # the round's crypto seed: the clients' master seeds derive from it and the round id
    noise_in_protocol: bool = False  # crypto mode: the protocol client adds every level (the vector has none)


@functools.lru_cache(maxsize=16)
def make_codec(dim: int, bits: int, clip: float, scale: float, rotation_seed: int, beta: float):  # noqa: ANN201
    from secagg_dp.quantize import ZqCodec

    return ZqCodec(dim, bits, clip, scale, rotation_seed=rotation_seed, beta=beta)


def block_rng(root_seed: int, round_: int, block: int, generator: str = "aes-counter") -> np.random.Generator:
    """The generator of one block of participants (rounding, noise, local sampling).

    Keyed by ``SeedSequence(root_seed, spawn_key=(1, round, 4, block))``: AES-CTR (randomgen ``AESCounter``
    seeded from that sequence) for ``"aes-counter"``, numpy's PCG64 for ``"pcg64"``.
    """
    return _generator(np.random.SeedSequence(root_seed, spawn_key=(1, round_, PURPOSE_CLIENT, block)), generator)


def noise_rng(root_seed: int, round_: int, generator: str = "aes-counter") -> np.random.Generator:
    """The generator of the aggregate noise draw of round ``round`` (ideal aggregator, ``client_noise`` False).

    Keyed by ``SeedSequence(root_seed, spawn_key=(1, round, 5))``, the same generator family as the blocks.
    """
    return _generator(np.random.SeedSequence(root_seed, spawn_key=(1, round_, PURPOSE_NOISE)), generator)


def _generator(seq: np.random.SeedSequence, generator: str) -> np.random.Generator:
    if generator == "aes-counter":
        from randomgen import AESCounter

        return np.random.Generator(AESCounter(seq))
    if generator == "pcg64":
        return np.random.Generator(np.random.PCG64(seq))
    raise ParameterError(f"Argument 'generator' must be one of {GENERATORS}, not {generator!r}.")


def blocks_of(ids, included: np.ndarray | None = None, size: int = BLOCK) -> list[Block]:  # noqa: ANN001
    """Split the sorted participants into fixed blocks (index, ids, keep): the unit of randomness.

    ``included`` (a boolean mask aligned with ``ids``) marks the clients whose vectors enter the sum; without
    it every block returns all its rows.
    """
    arr = np.asarray(ids, dtype=np.int64)
    return [
        (b, arr[i : i + size], None if included is None else included[i : i + size])
        for b, i in enumerate(range(0, len(arr), size))
    ]


def chunks_of(blocks: list[Block], size: int = CHUNK) -> list[list[Block]]:
    """Consecutive groups of ``size`` blocks: the units of work, the same for every executor."""
    return [blocks[i : i + size] for i in range(0, len(blocks), size)]


def draw_noise(mechanism: str, sigma_int: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """One client's int64 noise: discrete Gaussian N_Z(0, sigma^2) or symmetric Skellam of variance sigma^2."""
    from secagg_dp.noise import sample_discrete_gaussian, sample_skellam

    if mechanism == "ddg":
        return sample_discrete_gaussian(sigma_int, size, rng=rng)
    return sample_skellam(sigma_int**2, size, rng=rng)


def noise_master(spec: RoundSpec, client: int) -> bytes:
    """Client ``client``'s 32-byte add-then-remove master seed in this round: the one the protocol's seeded
    clients use (:func:`protocols.pool.simulated_noise_master` of the round's crypto seed and round id), so the
    ideal aggregator applies exactly the noise of the crypto round (simulation only)."""
    from protocols.pool import simulated_noise_master

    return simulated_noise_master(spec.noise_seed, _round_id(spec.noise_seed), client)


@functools.lru_cache(maxsize=16)
def _round_id(seed: int) -> bytes:
    """The round id a seeded crypto round uses (``protocols.pool.seeded_sources``), once per round."""
    from protocols.pool import seeded_sources

    return seeded_sources(seed)[0]


def noise_schedule(spec: RoundSpec):  # noqa: ANN201  (a NoiseSchedule, or None without enforcement)
    """The round's :class:`~secagg_dp.noise.add_then_remove.NoiseSchedule` (None without enforcement)."""
    if spec.enforcement is None:
        return None
    from secagg_dp.noise.add_then_remove import NoiseSchedule

    target, roster, tolerance = spec.enforcement
    return NoiseSchedule(target, roster, tolerance)


def _client_noise(spec: RoundSpec, ids: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """One int64 noise row per client: the mechanism's draw, or with enforcement level 0 plus the kept groups
    from each client's master seed (deterministic, so the protocol's removal matches bit for bit)."""
    schedule = noise_schedule(spec)
    if schedule is None:
        return draw_noise(spec.mechanism, spec.sigma_int, len(ids) * size, rng).reshape(len(ids), size)
    if spec.noise_in_protocol:
        return np.zeros((len(ids), size), dtype=np.int64)
    from secagg_dp.noise.add_then_remove import client_noise

    rows = [client_noise(schedule, noise_master(spec, int(c)), size, keep=spec.kept_groups) for c in ids]
    return np.stack(rows) if rows else np.zeros((0, size), dtype=np.int64)


def _client_block(
    spec: RoundSpec, codec: Any, ids: np.ndarray, rng: np.random.Generator, keep: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Client level, one block: the task's rows for ``ids`` (checked: shape, finite), clipped to C by the
    codec's quantizer (never trusted), rounded and noised once each (unless the ideal aggregator draws the
    noise of the sum, ``client_noise`` False). Without ``keep`` (protocol input): (residue rows, the task's
    rows); with it: (modular sum of the kept rows, plain float sum of their task rows). The same draws either
    way, so the sum equals the kept rows' sum bit for bit."""
    from simulations.tasks.protocol import call_task, check_rows

    task = spec.task
    rows = call_task(task, "client_vectors", spec.model, ids, spec.round, spec.root_seed, round=spec.round)
    x = check_rows(task, rows, len(ids), spec.dim, finite=keep is None)
    if keep is not None:  # the column sums check finiteness (a NaN or an infinity makes its column's sum so)
        cols = x.sum(axis=0)
        if not all_finite(cols):
            check_rows(task, rows, len(ids), spec.dim)  # the task's own message (passes if a sum overflowed)
    noise = _client_noise(spec, ids, codec.padded_dim, rng) if spec.client_noise else None
    if keep is None:
        return codec.encode(x, noise=noise, rng=rng), x
    part = codec.encode_sum(x, keep=keep, noise=noise, rng=rng)
    return part, (cols if keep.all() else x[keep].sum(axis=0))


def _encode_sample_level(spec: RoundSpec, codec: Any, cid: int, rng: np.random.Generator) -> np.ndarray:
    """Sample level (DP-SGD in the client): S local steps; in each, Poisson-sample the client's m examples at
    rate q, clip and encode every example's row on its own (one example moves the step's integer vector by at
    most the codec's Delta_2), add one noise share, decode the step locally for the task's local update, and
    add the step's residues to the round vector."""
    from simulations.tasks.protocol import call_task, check_rows

    task = spec.task
    m = int(call_task(task, "shard_size", spec.root_seed, round=spec.round))
    model = spec.model
    total = np.zeros(codec.padded_dim, dtype=np.uint64)
    for step in range(spec.local_steps):
        chosen = rng.random(m) < spec.sample_rate  # Poisson sampling inside the client
        vec = zq.wrap_int64(draw_noise(spec.mechanism, spec.sigma_int, codec.padded_dim, rng), spec.bits)
        if chosen.any():
            examples = np.flatnonzero(chosen)
            rows = call_task(task, "sample_vectors", model, cid, examples, spec.round, spec.root_seed, round=spec.round)
            rows = check_rows(task, rows, len(examples), spec.dim, "sample_vectors")
            vec = zq.add_mod(vec, zq.sum_mod(codec.encode(rows, rng=rng), spec.bits), spec.bits)
        if step + 1 < spec.local_steps:
            model = call_task(task, "local_update", model, codec.decode(vec), spec.sample_rate * m, round=spec.round)
        total = zq.add_mod(total, vec, spec.bits)
    return total


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters (malloc.h)


@functools.cache
def tune_allocator() -> bool:
    """Keep the block arrays' memory in this process's heap (glibc only; once per process; True if applied).

    A block allocates and frees arrays of about 1 MB (128 clients x 1024 float64) many times. By default glibc
    returns a freed top of heap above 2x the adaptive mmap threshold to the system, and the next block
    page-faults the same memory back in: 2-3x the CPU of the Hadamard transform and of the rounding, measured on
    a 2-core machine. Raising the trim threshold to 64 MB (and fixing the mmap threshold at 32 MB, since setting
    one switches glibc's adaptive thresholds off) keeps that memory; the heap then holds at most 64 MB more
    than is in use. Elsewhere (macOS, musl, Windows) nothing is changed and False is returned.
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")  # glibc's soname (find_library would spawn ldconfig)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, 64 << 20))


def wants_truth(task: Any) -> bool:
    """Whether the runner sums the participants' unclipped rows for the task's ``truth_metrics`` (mean: MSE)."""
    return callable(getattr(task, "truth_metrics", None))


def run_blocks(spec: RoundSpec, blocks: list[Block]) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    """Encode (and noise) the participants of the given blocks.

    Blocks with a ``keep`` mask (ideal aggregator) give ``(None, partial, truth)``: ``partial`` is the exact
    modular sum of the kept clients' vectors and ``truth`` the plain float sum of their rows (client level,
    tasks with ``truth_metrics`` such as mean estimation; else None), summed in block order. Blocks without
    one give ``(ids, rows, None)``: one uint64 row per client, the input of the secure-aggregation protocol.
    """
    tune_allocator()
    codec = make_codec(spec.dim, spec.bits, spec.clip, spec.scale, spec.rotation_seed, spec.beta)
    ids_out: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    acc = np.zeros(codec.padded_dim, dtype=np.uint64)
    truth = np.zeros(spec.dim) if spec.unit == "client" and wants_truth(spec.task) else None
    summing = bool(blocks) and blocks[0][2] is not None
    for block, ids, keep in blocks:
        rng = block_rng(spec.root_seed, spec.round, block, spec.generator)
        if spec.unit == "client":
            if summing:
                assert keep is not None  # summing: every block carries a keep mask (ideal aggregator)
                part, xsum = _client_block(spec, codec, ids, rng, keep)
                acc += part  # wraps mod 2^64; q divides 2^64, reduced below
                if truth is not None:
                    truth += xsum
                continue
            vecs, _ = _client_block(spec, codec, ids, rng, None)
        else:
            vecs = np.stack([_encode_sample_level(spec, codec, int(cid), rng) for cid in ids])
        if not summing:
            ids_out.append(ids)
            rows.append(vecs)
            continue
        assert keep is not None  # summing: every block carries a keep mask (ideal aggregator)
        if not keep.all():  # (a boolean-mask copy costs as much as the sum: skip it when nobody dropped)
            vecs = vecs[keep]
        acc += vecs.sum(axis=0, dtype=np.uint64)  # wraps mod 2^64; q divides 2^64, reduced below
    if summing:
        return None, acc & np.uint64((1 << spec.bits) - 1), truth
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, codec.padded_dim), dtype=np.uint64), None
    return np.concatenate(ids_out), np.concatenate(rows), None


#: Float64 values per batch of rows a block is encoded in for the protocol (:func:`encode_block_packed`) and its
#: truth summed in (:func:`client_truth`): 8 MB work arrays, one row at d = 2^20, the whole block at d = 1024.
ROW_VALUES = 1 << 20


def _rows_per_batch(dim: int, rows: int) -> int:
    """Rows per batch of a block of ``rows`` rows of length ``dim``: :data:`ROW_VALUES` values, at least one row."""
    return max(1, min(rows, ROW_VALUES // max(dim, 1)))


def encode_block_packed(spec: RoundSpec, block: Block) -> dict[int, bytes]:
    """The protocol inputs of one block of participants (no inclusion mask), each client's row bit-packed at
    ``spec.bits`` (``protocols.wire.pack_residues``): the rows ``run_blocks(spec, [block])`` returns, bit for
    bit, computed a batch of rows at a time (:data:`ROW_VALUES`), so the block never exists as rows x d.

    The block's generator is consumed in the order of :func:`_client_block`: the noise of every row first
    (one stream: the discrete Gaussian's batches by :func:`~secagg_dp.noise.discrete_gaussian.
    iter_discrete_gaussian`; Skellam's two Poisson halves, the first for every row, then the second), kept
    as packed residues (only the noise mod q enters the input: wrap is a ring map Z -> Z_q); then the
    rounding draws of every row and the redraws (:meth:`~secagg_dp.quantize.ZqCodec.quantize_stream`), each
    row's residues replacing its packed noise. Sample-level clients are encoded one after another, as in
    :func:`run_blocks`."""
    from protocols import wire

    tune_allocator()
    codec = make_codec(spec.dim, spec.bits, spec.clip, spec.scale, spec.rotation_seed, spec.beta)
    index, ids, keep = block
    if keep is not None:
        raise ParameterError("Argument 'block' must carry no inclusion mask (every row is an input).")
    bits, d = spec.bits, codec.padded_dim
    rng = block_rng(spec.root_seed, spec.round, index, spec.generator)
    cids = [int(c) for c in ids]
    if spec.unit != "client":
        return {c: wire.pack_residues(_encode_sample_level(spec, codec, c, rng), bits) for c in cids}
    noise: dict[int, bytes] = {}  # client -> its packed noise residues, until its row replaces them
    schedule = noise_schedule(spec) if spec.client_noise else None
    if spec.client_noise and schedule is None:
        _noise_residues(spec, cids, d, rng, noise)
    task = spec.task
    step = _rows_per_batch(max(spec.dim, d), len(cids))

    def batches() -> Any:
        from simulations.tasks.protocol import call_task, check_rows

        for lo in range(0, len(cids), step):
            part = ids[lo : lo + step]
            rows = call_task(task, "client_vectors", spec.model, part, spec.round, spec.root_seed, round=spec.round)
            yield check_rows(task, rows, len(part), spec.dim)

    out: dict[int, bytes] = {}
    for i, xq in codec.quantize_stream(batches(), rng=rng):
        c = cids[i]
        row = zq.wrap_int64(xq, bits)
        if c in noise:
            row = zq.add_mod(row, wire.unpack_residues(noise.pop(c), d, bits), bits)
        elif schedule is not None and not spec.noise_in_protocol:  # add-then-remove, applied here (ideal mode)
            from secagg_dp.noise.add_then_remove import client_noise

            z = client_noise(schedule, noise_master(spec, c), d, keep=spec.kept_groups)
            row = zq.add_mod(row, zq.wrap_int64(z, bits), bits)
        out[c] = wire.pack_residues(row, bits)
    return {c: out[c] for c in cids}


def _noise_residues(spec: RoundSpec, cids: list[int], d: int, rng: np.random.Generator, into: dict[int, bytes]) -> None:
    """The draws of :func:`draw_noise` for ``len(cids)`` rows of ``d`` (one call, row-major), one row at a time:
    ``into[c]`` = client c's noise mod 2^bits, packed. Skellam is Poisson(v/2) - Poisson(v/2) with every first
    half drawn before any second half (:func:`secagg_dp.noise.sample_skellam`), so the second pass subtracts."""
    from protocols import wire
    from secagg_dp.noise.discrete_gaussian import iter_discrete_gaussian

    bits = spec.bits
    if spec.mechanism == "ddg":
        buf = np.empty(d, dtype=np.int64)
        fill, row = 0, 0
        for piece in iter_discrete_gaussian(spec.sigma_int, len(cids) * d, rng=rng):
            pos = 0
            while pos < piece.size:
                take = min(d - fill, piece.size - pos)
                buf[fill : fill + take] = piece[pos : pos + take]
                fill, pos = fill + take, pos + take
                if fill == d:
                    into[cids[row]] = wire.pack_residues(zq.wrap_int64(buf, bits), bits)
                    fill, row = 0, row + 1
        return
    lam = 0.5 * float(spec.sigma_int**2)  # sample_skellam's Poisson mean, v / 2 (v as draw_noise passes it)
    for c in cids:
        into[c] = wire.pack_residues(zq.wrap_int64(rng.poisson(lam, d).astype(np.int64, copy=False), bits), bits)
    for c in cids:
        half = zq.wrap_int64(rng.poisson(lam, d).astype(np.int64, copy=False), bits)
        into[c] = wire.pack_residues(zq.sub_mod(wire.unpack_residues(into[c], d, bits), half, bits), bits)


class BlockInputs:
    """The protocol inputs of a round's participants, made one block at a time: ``inputs(cid)`` is client
    ``cid``'s uint64 row, the row :func:`run_blocks` gives it among all participants (its block, of the
    :func:`blocks_of` layout of ``ids``, is encoded with that block's generator by :func:`encode_block_packed`,
    so the numbers are the same bit for bit). The last encoded block is kept, bit-packed, until each of its
    rows has been handed out (or another block is asked for), so memory is one block of packed rows
    (``BLOCK`` x padded d x bits / 8 bytes) and a batch of work rows, never participants x d. The ``make`` of
    :class:`protocols.LazyInputs` (a forked worker of ``protocols.procpool`` inherits it and encodes its own
    shard's blocks). ``seconds``: time spent encoding in this process."""

    def __init__(self, spec: RoundSpec, ids: Any) -> None:
        self._setup(spec, blocks_of(np.asarray(ids, dtype=np.int64)))  # the layout (and generators) of run_blocks

    @classmethod
    def of_blocks(cls, spec: RoundSpec, blocks: list[Block]) -> BlockInputs:
        """The inputs of the clients of ``blocks`` only (some consecutive blocks of the round's
        :func:`blocks_of` layout, without inclusion masks: e.g. one Dask shard's)."""
        out = cls.__new__(cls)
        out._setup(spec, list(blocks))
        return out

    def _setup(self, spec: RoundSpec, blocks: list[Block]) -> None:
        ids = np.concatenate([b[1] for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
        if np.any(np.diff(ids) <= 0) or any(len(b[1]) == 0 for b in blocks):
            raise ParameterError("Argument 'ids' must be sorted participant ids without repeats.")
        if any(b[2] is not None for b in blocks):
            raise ParameterError("Argument 'blocks' must carry no inclusion mask (every row is an input).")
        self._spec = spec
        self._blocks = blocks
        self._first = np.array([b[1][0] for b in blocks], dtype=np.int64)
        self._block = -1  # position in self._blocks of the block held, -1: none
        self._left: dict[int, bytes] = {}  # held block: id -> packed row, for rows not handed out yet
        self._dim = make_codec(spec.dim, spec.bits, spec.clip, spec.scale, spec.rotation_seed, spec.beta).padded_dim
        self.seconds = 0.0

    @property
    def ids(self) -> list[int]:
        """Every participant id, ascending."""
        return [int(c) for b in self._blocks for c in b[1]]

    def __call__(self, cid: int) -> np.ndarray:
        from protocols import wire

        cid = int(cid)
        b = int(np.searchsorted(self._first, cid, side="right")) - 1
        if b < 0 or cid not in self._blocks[b][1]:
            raise ParameterError(f"Argument 'cid': {cid} is not a participant of this round.")
        if b != self._block or cid not in self._left:  # (a row asked for twice is encoded again: the same row)
            self._block, self._left = -1, {}  # let the held block go first
            t0 = time.perf_counter()
            self._left = encode_block_packed(self._spec, self._blocks[b])
            self.seconds += time.perf_counter() - t0
            self._block = b
        row = wire.unpack_residues(self._left.pop(cid), self._dim, self._spec.bits)
        if not self._left:  # every row of the block handed out (the clients pack their rows)
            self._block = -1
        return row


def block_inputs(spec: RoundSpec, blocks: list[Block]) -> tuple[np.ndarray, BlockInputs]:
    """A shard loader for the crypto mode's Dask pool (``simulations.crypto_pool``): the ids of ``blocks`` and
    the :class:`BlockInputs` that encodes their rows on the worker, one block at a time, as the clients are
    built (not the shard's rows all at once)."""
    inputs = BlockInputs.of_blocks(spec, blocks)
    return np.asarray(inputs.ids, dtype=np.int64), inputs


def client_truth(spec: RoundSpec, ids: Any) -> np.ndarray | None:
    """Plain sum of the rows of ``ids`` for tasks with ``truth_metrics`` (else None), in blocks of ``BLOCK``."""
    if spec.unit != "client" or not wants_truth(spec.task):
        return None
    from simulations.tasks.protocol import call_task, check_rows

    arr = np.asarray(ids, dtype=np.int64)
    task, r = spec.task, spec.round
    total = np.zeros(spec.dim)
    for i in range(0, len(arr), BLOCK):
        block = arr[i : i + BLOCK]
        step = _rows_per_batch(spec.dim, len(block))
        if step >= len(block):
            rows = call_task(task, "client_vectors", spec.model, block, r, spec.root_seed, round=r)
            total += check_rows(task, rows, len(block), spec.dim).sum(axis=0)
            continue
        # a batch of rows at a time; numpy sums axis 0 row after row, so adding the rows in order into a zero
        # vector gives the block's .sum(axis=0) bit for bit (tested)
        acc = np.zeros(spec.dim)
        for lo in range(0, len(block), step):
            part = block[lo : lo + step]
            rows = call_task(task, "client_vectors", spec.model, part, r, spec.root_seed, round=r)
            for row in check_rows(task, rows, len(part), spec.dim):
                acc += row
        total += acc
    return total
