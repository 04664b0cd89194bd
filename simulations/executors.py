"""Where client work runs: in this process, or fanned out over a Dask distributed cluster.

Both executors call the same pure function on the same chunks (fixed groups of client blocks, see
``simulations.clients.chunks_of``), and every block's randomness is keyed by its index, so the results are
identical for the same seeds (tested on a LocalCluster). On Dask the round's parameters are scattered to
the workers once per call and each task carries only its chunk's id arrays and inclusion masks; in the
ideal mode a task returns one partial modular sum, so traffic does not grow with d per client. In the
crypto mode :meth:`DaskExecutor.client_pool` keeps the protocol's clients on the workers for the round
(``simulations.crypto_pool``); with the in-process executor the protocol's clients run in forked worker
processes over the usable cores for a large round (``protocols.procpool.client_pool``), else in the driver.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from secagg_dp.errors import ConfigError

T = TypeVar("T")

__all__ = ["InProcessExecutor", "DaskExecutor", "make_executor", "chunked"]


def chunked(ids: Sequence[T], n_chunks: int) -> list[list[T]]:
    """Split ids into at most ``n_chunks`` contiguous, non-empty chunks."""
    ids = list(ids)
    n_chunks = max(1, min(n_chunks, len(ids)))
    size = -(-len(ids) // n_chunks) if ids else 1
    return [ids[i : i + size] for i in range(0, len(ids), size)]


class InProcessExecutor:
    """Client work in this process, chunk after chunk (the reference; crypto-mode clients run in the driver)."""

    name = "inprocess"

    def map_chunks(self, fn: Callable[..., Any], spec: Any, chunks: list[Any], **kw: Any) -> list[Any]:
        return [fn(spec, chunk, **kw) for chunk in chunks]

    @property
    def parallelism(self) -> int:
        return 1

    def close(self) -> None:
        pass

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DaskExecutor:
    """Client work on Dask: ``address`` of a running scheduler, or '' for a LocalCluster on this machine."""

    name = "dask"

    def __init__(self, address: str = "", *, n_workers: int = 2, processes: bool = True) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:  # optional extra
            raise ConfigError("executor = 'dask' needs the optional extra: pip install 'secagg-dp[dask]'.") from exc
        self._cluster = None
        if address:
            self._client = Client(address)
        else:
            import dask

            # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in each worker; any such setting switches off
            # glibc's dynamic mmap threshold, so every block array (~2 MB) is a fresh mmap with page faults:
            # 1.5x the CPU of the same task in-process (measured). Unset it for the workers we start, and
            # switch off the workers' statistical profiler (a 10 ms sampling thread; no dashboard here).
            settings = {
                "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                "distributed.worker.profile.enabled": False,
            }
            # The scheduler's HTTP server starts even without a dashboard; ":0" gives it a free port, so a
            # second cluster on the machine (whose 8787 is taken) does not warn or fail.
            with dask.config.set(settings):
                self._cluster = LocalCluster(
                    n_workers=n_workers, threads_per_worker=1, processes=processes, dashboard_address=":0"
                )
            self._client = Client(self._cluster)
        self._workers = max(1, len(self._client.scheduler_info().get("workers", {})) or n_workers)
        # import the client code on every worker now (about a second each), not inside the first round
        self._client.run(importlib.import_module, "simulations.clients")

    @property
    def parallelism(self) -> int:
        return self._workers

    def map_chunks(self, fn: Callable[..., Any], spec: Any, chunks: list[Any], **kw: Any) -> list[Any]:
        if not chunks:
            return []
        shared = self._client.scatter(spec, broadcast=True, hash=False)  # the model ships once per worker
        futures = [self._client.submit(fn, shared, chunk, pure=False, **kw) for chunk in chunks]
        out: list[Any] = self._client.gather(futures)  # gather keeps submission order
        self._client.cancel([shared])
        return out

    def client_pool(self, loads: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> Any:
        """The crypto mode's clients on the workers: one shard per ``(loader, args)``, see
        :class:`simulations.crypto_pool.DaskClientPool` (close it after the round)."""
        from simulations.crypto_pool import DaskClientPool

        return DaskClientPool(self._client, loads)

    def close(self) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_executor(kind: str, scheduler: str = "", *, processes: bool = True) -> InProcessExecutor | DaskExecutor:
    """The executor named by the config key ``executor`` (``scheduler``: a Dask address, '' for a LocalCluster)."""
    if kind == "inprocess":
        return InProcessExecutor()
    if kind == "dask":
        return DaskExecutor(scheduler, processes=processes)
    raise ConfigError(f"Config key 'executor' must be 'inprocess' or 'dask', not {kind!r}.")
