"""The crypto mode's clients on Dask workers; the server and the transport stay on the driver.

:class:`DaskClientPool` implements :class:`protocols.ClientPool`. Each shard (a contiguous range of client
ids) is a Dask actor pinned to one worker for the round: it builds its clients' inputs there (a loader
called on the worker, e.g. the simulator's encoder regenerating them from the seed), creates their Ed25519
identities (only the public keys travel to the driver), and keeps the :class:`~protocols.SecAggClient`
objects, with their key agreement, share encryption and masking, in the worker's memory. Per stage the
driver sends a shard only the envelopes it needs (broadcasts to every shard, a unicast to the shard of its
recipient) with their positions in the stage's delivery order, and :func:`protocols.pool.merge` puts the
replies back into the order of the sequential loop, so a seeded run matches :class:`~protocols.InProcessClientPool`
bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from protocols import messages as m
from protocols import wire
from protocols.pki import KeyRegistry
from protocols.pool import (
    InProcessClientPool,
    Reply,
    RoundPlan,
    merge,
    own_identities,
    own_replies,
    serve,
    shard_silences,
)
from protocols.transport import Envelope
from secagg_dp import zq
from secagg_dp.errors import ConfigError, ParameterError

__all__ = ["ClientShard", "DaskClientPool", "given_inputs"]

#: A loader and its arguments, called on the worker: returns ``(ids, rows)`` (or a longer tuple starting so),
#: the shard's client ids and one uint64 input row per id, or ``rows`` a callable id -> that row, called once
#: per client when the shard builds it (``simulations.clients.block_inputs``: no shard x d array).
Load = tuple[Callable[..., tuple[Any, ...]], tuple[Any, ...]]


def given_inputs(ids: Sequence[int], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A loader for inputs the driver already holds (they are shipped to the shard's worker)."""
    return np.asarray(ids, dtype=np.int64), np.asarray(rows, dtype=np.uint64)


class ClientShard:
    """The clients of one shard for one round, living on a Dask worker (used as a Dask actor)."""

    def __init__(self, load: Callable[..., tuple[Any, ...]], args: tuple[Any, ...]) -> None:
        ids, rows = load(*args)[:2]
        ids = [int(c) for c in np.asarray(ids).tolist()]
        self._ids = ids
        self._cpu: dict[str, float] = {}
        if callable(rows):  # made one client at a time in start()
            if not ids:
                raise ParameterError("Argument 'load' must return at least one id.")
            self._pool = InProcessClientPool.lazy(ids, rows)
            return
        if not ids or len(ids) != len(rows):
            raise ParameterError(
                f"Argument 'load' must return as many input rows as ids (>= 1), not {len(rows)} for {len(ids)}."
            )
        # The rows are bit-packed now (at the width of their largest value), so the loader's (clients x d)
        # uint64 array is let go when this returns; start() builds each client from its packed row.
        arr = zq.check_residues("rows", rows, zq.MAX_BITS)
        self._width = max(1, int(arr.max()).bit_length()) if arr.size else 1
        self._dim = arr.shape[-1]
        self._packed = {cid: wire.pack_residues(row, self._width) for cid, row in zip(ids, arr, strict=True)}
        self._pool = InProcessClientPool.lazy(ids, self._unpack)

    def _unpack(self, cid: int) -> np.ndarray:
        """Client ``cid``'s input row, released from the shard's packed store once its client holds it."""
        return wire.unpack_residues(self._packed.pop(cid), self._dim, self._width)

    def ids(self) -> list[int]:
        """The shard's client ids, ascending."""
        return self._ids

    def identities(self, plan: RoundPlan) -> dict[int, bytes]:
        """Create the clients' identity keys here; only the public keys are returned."""
        return self._pool.identities(plan)

    def start(self, plan: RoundPlan, keys: Mapping[int, bytes] | None, silent_from: Mapping[int, str]) -> None:
        """Build the clients with the round's key registry (``keys``: every client's public identity key)."""
        self._pool.start(plan, None if keys is None else KeyRegistry(keys), silent_from)

    def serve(self, stage: str, envelopes: list[tuple[int, Envelope]]) -> list[Reply]:
        """:func:`protocols.pool.serve` on this shard's clients (envelopes tagged with their positions)."""
        t0 = time.thread_time()
        out = serve(self._pool.clients, self._pool.silent_from, stage, envelopes)
        self._cpu[stage] = self._cpu.get(stage, 0.0) + time.thread_time() - t0
        return out

    def cpu_seconds(self) -> dict[str, float]:
        """Thread CPU seconds its clients spent per stage (the work a worker does, without Dask's own)."""
        return dict(self._cpu)


class DaskClientPool:
    """A :class:`protocols.ClientPool` whose clients live on Dask workers, one shard per entry of ``loads``
    (shard i on worker i mod W). ``client`` is a connected ``distributed.Client``."""

    def __init__(self, client: Any, loads: Sequence[Load]) -> None:
        if not loads:
            raise ParameterError("Argument 'loads' must name at least one shard.")
        workers = sorted(client.scheduler_info().get("workers", {}))
        if not workers:
            raise ConfigError("The Dask cluster has no workers; start some (dask worker ADDRESS) and retry.")
        self._client = client
        self._futures = [
            client.submit(
                ClientShard,
                fn,
                tuple(args),
                actor=True,
                pure=False,
                workers=[workers[i % len(workers)]],
                allow_other_workers=False,
            )
            for i, (fn, args) in enumerate(loads)
        ]
        self._owner: dict[int, int] = {}
        try:
            self._shards = [f.result() for f in self._futures]
            for s, ids in enumerate(self._call("ids")):
                for cid in ids:
                    if self._owner.setdefault(cid, s) != s:
                        raise ParameterError(f"Argument 'loads' puts client {cid} in two shards.")
        except BaseException:
            self.close()
            raise

    @property
    def ids(self) -> list[int]:
        """Every client id in the pool, ascending."""
        return sorted(self._owner)

    def _call(self, method: str, per_shard: Sequence[tuple[Any, ...]] | None = None) -> list[Any]:
        """Call ``method`` on every shard at once (with its own arguments), results in shard order."""
        args = per_shard or [()] * len(self._shards)
        futures = [getattr(shard, method)(*a) for shard, a in zip(self._shards, args, strict=True)]
        return [f.result() for f in futures]

    def identities(self, plan: RoundPlan) -> dict[int, bytes]:
        """Every shard creates its clients' identities; the public keys of all of them."""
        return own_identities(self._call("identities", [(plan,)] * len(self._shards)), self._owner)

    def start(self, plan: RoundPlan, registry: KeyRegistry | None, silent_from: Mapping[int, str]) -> None:
        """Send each shard the registry's keys and its own clients' silences; the shards build their clients."""
        keys = None if registry is None else dict(registry.keys)
        silent = shard_silences(silent_from, self._owner, len(self._shards))
        self._call("start", [(plan, keys, silent[s]) for s in range(len(self._shards))])

    def deliver(self, stage: str, envelopes: Sequence[Envelope]) -> tuple[list[Envelope], list[str]]:
        """Route the envelopes to the shards (all shards at once) and merge their replies in sequential order."""
        routed: list[list[tuple[int, Envelope]]] = [[] for _ in self._shards]
        for pos, env in enumerate(envelopes):
            if env.recipient == m.BROADCAST:
                for part in routed:
                    part.append((pos, env))
            elif env.recipient in self._owner:  # an envelope for nobody in the round is dropped, as in-process
                routed[self._owner[env.recipient]].append((pos, env))
        busy = [s for s, part in enumerate(routed) if part]
        futures = [self._shards[s].serve(stage, routed[s]) for s in busy]
        refused: list[str] = []
        parts = [
            own_replies(stage, s, {pos: env.recipient for pos, env in routed[s]}, self._owner, f.result(), refused)
            for s, f in zip(busy, futures, strict=True)
        ]
        uplink, reports = merge(parts)
        return uplink, reports + refused

    def cpu_seconds(self) -> list[dict[str, float]]:
        """Per shard, the thread CPU seconds its clients spent in each stage so far."""
        return self._call("cpu_seconds")

    def close(self) -> None:
        """Release the shards (their clients and keys are dropped on the workers)."""
        self._shards = []
        self._client.cancel(self._futures)
        self._futures = []

    def __enter__(self) -> DaskClientPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
