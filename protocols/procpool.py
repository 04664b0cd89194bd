"""The clients of a round in forked worker processes, one shard of consecutive ids per process.

:class:`ProcessClientPool` implements :class:`~protocols.pool.ClientPool` with the standard library only: at
construction it forks ``workers`` processes (``multiprocessing`` "fork" start method, POSIX), each inheriting
its own shard of the inputs and holding an :class:`~protocols.pool.InProcessClientPool` of those clients for
the round. The inputs are a dict, or :class:`~protocols.pool.LazyInputs` (ids and a function ``make(cid)``):
then each worker calls ``make`` for its own shard's clients only, one client at a time when it builds them,
and no process ever holds an n x d array (``make`` is inherited through the fork, never pickled).

Per stage the driver reads the downlink envelopes one by one (a lazily built downlink is built here, in the
driver, while the workers already handle the envelopes sent so far), sends each shard the envelopes for its
clients (a broadcast to every shard) in batches tagged with their delivery positions, and
:func:`~protocols.pool.merge` puts the replies back into the order of the sequential loop. Every client
derives its keys and nonces from the round's plan wherever it runs, so a seeded round is bit for bit the round
of :class:`~protocols.pool.InProcessClientPool` (``tests/protocols/test_procpool.py``).

A worker speaks only for its own shard: a reply in another client's name, for an envelope the shard was not
sent, or repeated, is refused and reported, never merged, and a worker may register identity keys only for
its own clients (the same checks as the Dask pool of ``simulations``).

:func:`client_pool` picks the pool :func:`~protocols.round.run_secagg_round` uses: this one over the usable
cores on Linux when there are at least two and the round is large enough (``MIN_CLIENTS_PER_WORKER`` per worker),
else the in-process one.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from protocols import messages as m
from protocols.pki import KeyRegistry
from protocols.pool import (
    InProcessClientPool,
    LazyInputs,
    Reply,
    RoundPlan,
    after_stage,
    merge,
    own_identities,
    own_replies,
    serve,
    shard_silences,
)
from protocols.transport import Envelope
from secagg_dp.errors import ParameterError, ProtocolError

__all__ = ["ProcessClientPool", "client_pool", "usable_cores", "MIN_CLIENTS_PER_WORKER", "BATCH"]

#: Fewest clients per worker process for :func:`client_pool` to fork (below, forking costs more than it saves).
MIN_CLIENTS_PER_WORKER = 256
#: Envelopes per message from the driver to a worker (a broadcast counts once per shard).
BATCH = 64


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the OS reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def client_pool(
    inputs: Mapping[int, np.ndarray] | LazyInputs, workers: int | None = None
) -> InProcessClientPool | ProcessClientPool:
    """The pool a round's clients run in: ``workers=None`` forks one process per usable core on Linux when
    there are at least two and every worker gets ``MIN_CLIENTS_PER_WORKER`` clients or more; ``workers=1``
    (or a small round) runs them in this process (:class:`InProcessClientPool`); ``workers > 1`` forks that
    many wherever the "fork" start method exists. Either gives the same seeded round bit for bit. ``inputs``:
    a dict id -> uint64 vector, or :class:`~protocols.pool.LazyInputs` (each input made by ``make(cid)``
    where its client is built, so no n x d array exists). Either pool is a context manager: use it in a
    ``with`` block (or call ``close()``) so that forked workers stop after the round."""
    n = len(inputs)
    if workers is None:  # forking by default on Linux only (macOS and Windows default to spawning processes)
        can_fork = sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods()
        workers = min(usable_cores(), n // MIN_CLIENTS_PER_WORKER) if can_fork else 1
    elif not (type(workers) is int and workers >= 1):
        raise ParameterError(f"Argument 'workers' must be a positive int or None, not {workers!r}.")
    if workers <= 1 or n < 2:
        return InProcessClientPool.of_inputs(inputs)
    return ProcessClientPool(inputs, workers)


def _shard_main(conn: Connection, ids: list[int], make: Callable[[int], np.ndarray]) -> None:
    """A worker: serve the driver's commands on the clients ``ids`` (inputs from ``make``) until told to close."""
    pool = InProcessClientPool.lazy(ids, make)
    del make
    replies: list[Reply] = []
    failure: BaseException | None = None
    cpu = 0.0
    stage = ""
    while True:
        try:
            op, *args = conn.recv()
        except (EOFError, KeyboardInterrupt):  # the driver is gone or interrupted (it stops the workers)
            return
        try:
            if op == "serve":
                stage = args[0]
                if failure is None:
                    t0 = time.process_time()
                    replies.extend(serve(pool.clients, pool.silent_from, stage, args[1]))
                    cpu += time.process_time() - t0
                continue
            if op == "end":
                if failure is not None:
                    raise failure
                out: Any = (replies, cpu)
                replies, cpu = [], 0.0
                after_stage(stage)  # as InProcessClientPool.deliver
            elif op == "identities":
                out = pool.identities(args[0])
            elif op == "start":
                plan, keys, silent = args
                pool.start(plan, None if keys is None else KeyRegistry(keys), silent)
                out = None
            elif op == "close":
                conn.close()
                return
            else:
                raise ProtocolError(f"unknown pool command {op!r}")
            conn.send(("ok", out))
        except BaseException as e:  # handed to the driver, which raises it
            if op == "serve":
                failure = e
                continue
            failure, replies = None, []
            try:
                conn.send(("error", e))
            except Exception:  # an exception that does not pickle
                conn.send(("error", ProtocolError(f"worker failed: {e!r}")))


class ProcessClientPool:
    """A :class:`~protocols.pool.ClientPool` of forked worker processes, shard i holding the i-th of
    ``workers`` near-equal runs of the ascending client ids (see the module docstring). ``inputs``: a dict
    id -> uint64 vector, or :class:`~protocols.pool.LazyInputs` (see :meth:`lazy`)."""

    def __init__(self, inputs: Mapping[int, np.ndarray] | LazyInputs, workers: int) -> None:
        if not isinstance(inputs, (Mapping, LazyInputs)) or not inputs:
            raise ParameterError(
                "Argument 'inputs' must be a non-empty dict {client id: uint64 vector} or LazyInputs, "
                f"not {type(inputs).__name__}."
            )
        if not (type(workers) is int and workers >= 1):
            raise ParameterError(f"Argument 'workers' must be a positive int, not {workers!r}.")
        if "fork" not in mp.get_all_start_methods():
            raise ParameterError("Argument 'workers': this platform cannot fork; use InProcessClientPool.")
        ids = list(inputs.ids) if isinstance(inputs, LazyInputs) else sorted(inputs)
        cuts = np.linspace(0, len(ids), min(workers, len(ids)) + 1).astype(int)
        shards = [ids[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        self._owner = {cid: s for s, part in enumerate(shards) for cid in part}
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self.cpu: dict[str, float] = {}  # stage -> the workers' process CPU seconds serving it, summed
        ctx = mp.get_context("fork")
        # Objects that exist now are shared with the workers copy-on-write; frozen, the workers' garbage
        # collector never walks them (which would touch, and so copy, every page of the driver's heap).
        gc.freeze()
        try:
            for part in shards:
                here, there = ctx.Pipe()
                # the worker's own inputs: the shared make (called there for this shard's ids only), or the
                # dict's vectors for this shard, each let go once its client holds a packed copy
                make = inputs.make if isinstance(inputs, LazyInputs) else {c: inputs[c] for c in part}.pop
                proc = ctx.Process(target=_shard_main, args=(there, part, make), daemon=True)
                proc.start()
                there.close()
                self._conns.append(here)
                self._procs.append(proc)
        except BaseException:
            self.close()
            raise
        finally:
            gc.unfreeze()

    @classmethod
    def lazy(cls, ids: Sequence[int], make: Callable[[int], np.ndarray], workers: int) -> ProcessClientPool:
        """A pool of the clients ``ids`` in ``workers`` forked processes, each worker making its own shard's
        inputs with ``make(id)`` one client at a time when it builds them (:class:`~protocols.pool.LazyInputs`;
        the counterpart of :meth:`InProcessClientPool.lazy <protocols.pool.InProcessClientPool.lazy>`)."""
        return cls(LazyInputs(tuple(ids), make), workers)

    @property
    def ids(self) -> list[int]:
        """Every client id in the pool, ascending."""
        return sorted(self._owner)

    @property
    def workers(self) -> int:
        """The number of worker processes."""
        return len(self._conns)

    def _answers(self) -> list[Any]:
        """One answer from every worker, in shard order; the first failure is raised once all have answered
        (so no answer is left unread for the next command)."""
        out: list[Any] = []
        failure: BaseException | None = None
        for s, conn in enumerate(self._conns):
            try:
                status, got = conn.recv()
            except EOFError:
                status, got = "error", ProtocolError(f"client pool worker {s} exited")
            if status != "ok":
                failure = failure or got
            out.append(got)
        if failure is not None:
            raise failure
        return out

    def _all(self, per_shard: Sequence[tuple[Any, ...]]) -> list[Any]:
        for conn, msg in zip(self._conns, per_shard, strict=True):
            conn.send(msg)
        return self._answers()

    def identities(self, plan: RoundPlan) -> dict[int, bytes]:
        """Every worker creates its clients' identities; the public keys of all of them."""
        return own_identities(self._all([("identities", plan)] * len(self._conns)), self._owner)

    def start(self, plan: RoundPlan, registry: KeyRegistry | None, silent_from: Mapping[int, str]) -> None:
        """Send each worker the registry's keys and its own clients' silences; the workers build their clients."""
        keys = None if registry is None else dict(registry.keys)
        silent = shard_silences(silent_from, self._owner, len(self._conns))
        self._all([("start", plan, keys, silent[s]) for s in range(len(self._conns))])

    def deliver(self, stage: str, envelopes: Sequence[Envelope]) -> tuple[list[Envelope], list[str]]:
        """Stream the envelopes to the workers in batches as they are read (a list is cleared entry by entry),
        then merge the workers' replies into the sequential order."""
        batches: list[list[tuple[int, Envelope]]] = [[] for _ in self._conns]
        sent: list[dict[int, int]] = [{} for _ in self._conns]  # position -> recipient (not the envelope)
        # one sender thread per worker, so a worker busy with its last batch never holds up another's feed
        queues: list[queue.SimpleQueue[tuple[Any, ...] | None]] = [queue.SimpleQueue() for _ in self._conns]
        errors: list[BaseException] = []

        def feed(conn: Connection, q: queue.SimpleQueue[tuple[Any, ...] | None]) -> None:
            while (msg := q.get()) is not None:
                try:
                    conn.send(msg)
                except BaseException as e:  # raised in the driver below
                    errors.append(e)
                    return

        threads = [
            threading.Thread(target=feed, args=(c, q), daemon=True) for c, q in zip(self._conns, queues, strict=True)
        ]
        for th in threads:
            th.start()
        try:
            slots: Any = envelopes
            for pos in range(len(envelopes)):
                env = slots[pos]
                if isinstance(slots, list):
                    slots[pos] = None
                if env.recipient == m.BROADCAST:
                    targets: Sequence[int] = range(len(self._conns))
                elif env.recipient in self._owner:  # an envelope for nobody in the round is dropped, as in-process
                    targets = (self._owner[env.recipient],)
                else:
                    continue
                for s in targets:
                    batches[s].append((pos, env))
                    sent[s][pos] = env.recipient
                    if len(batches[s]) >= BATCH:
                        queues[s].put(("serve", stage, batches[s]))
                        batches[s] = []
            for s in range(len(self._conns)):
                if batches[s]:
                    queues[s].put(("serve", stage, batches[s]))
                queues[s].put(("end",))
        finally:
            for q in queues:
                q.put(None)
        for th in threads:
            th.join()
        if errors:
            raise ProtocolError(f"client pool: sending to a worker failed: {errors[0]!r}")
        parts: list[list[Reply]] = []
        refused: list[str] = []
        for s, (replies, cpu) in enumerate(self._answers()):
            self.cpu[stage] = self.cpu.get(stage, 0.0) + cpu
            parts.append(own_replies(stage, s, sent[s], self._owner, replies, refused))
        uplink, reports = merge(parts)
        return uplink, reports + refused

    def close(self) -> None:
        """Stop the workers (their clients and keys go with them)."""
        for conn in self._conns:
            try:
                conn.send(("close",))
            except (OSError, ValueError):
                pass
            conn.close()
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._conns, self._procs = [], []

    def __enter__(self) -> ProcessClientPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
