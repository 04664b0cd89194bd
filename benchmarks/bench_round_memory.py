"""Peak memory and upload size of one secure-aggregation round, each configuration in a fresh process.

A round of n clients with d-dimensional inputs in Z_{2^bits} runs through ``protocols.run_pooled_round`` on an
:class:`~protocols.InProcessClientPool` whose clients build their inputs one at a time (from a seeded generator:
no n x d array), SecAgg+ with degree k (default 32) and the smallest threshold an active client accepts, active mode,
10 % of the clients silent from the masked-input stage on. Printed per configuration: the peak RSS of the
process (``ru_maxrss``) against the same process's RSS before the round (imports, libraries), the packed input
of all clients (n d bits / 8 bytes, the baseline), and the MaskedInput size against the raw vector (d bits / 8);
then the stage split (Linux: /proc): the RSS when each stage's downlink reaches the clients (after the server's
part of the previous stage), after the clients' replies, and the peak so far.

With ``--workers W`` (W >= 2) the clients run in W forked worker processes (``protocols.ProcessClientPool``,
what ``run_secagg_round`` and the simulator's crypto mode pick by default on a multi-core Linux machine),
handed all inputs as one dict as ``run_secagg_round``'s caller does. The peak printed is then an upper bound
on the round's memory: the driver's peak RSS plus each worker's peak RSS (``VmHWM``, read before the pool
closes), which counts the pages a worker shares copy-on-write with the driver twice.

Run: python benchmarks/bench_round_memory.py [--n N --d D --bits B --k K] [--baseline] [--workers W]
(default: the two configurations of the targets, n = 10^4, d = 10^3 and n = 100, d = 10^6, at 20 bits;
``--baseline`` hands the in-process pool all inputs as one dict of uint64 vectors, as a caller of
``run_secagg_round`` does)

``--simulate K [--d D --k K --workers W ...]`` measures the simulator's crypto round instead (what
``secagg-dp simulate`` runs per round with the in-process executor: ``simulations.runner.aggregate_round``;
K participants, mean task of dimension d, SecAgg+ degree k, 32 bits, active mode, no dropouts), twice, each in
a fresh process: as it runs now (each client's row encoded when its client is built, one block of
participants at a time, ``simulations.clients.BlockInputs``) and, as the baseline, as it ran before (git rev
26b9ec8: every participant's row encoded first, chunk by chunk, and concatenated into one K x d array handed to
``simulations.aggregators.crypto_round``; reproduced here with the same public functions). Printed: the peak RSS
of the driver, of each forked worker (``--workers W``, W >= 2: ``protocols.procpool`` forks W workers; W = 1
keeps the clients in the driver), their sum, the new / old ratio, and whether both runs gave the same aggregate.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def _status() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes from /proc (Linux); (0, 0) elsewhere."""
    try:
        with open("/proc/self/status") as f:
            got = {
                k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f) if k in ("VmRSS", "VmHWM")
            }
    except OSError:
        return 0, 0
    return got.get("VmRSS", 0), got.get("VmHWM", 0)


def _hwm(pid: int) -> int:
    """Peak RSS (VmHWM) of process ``pid`` in bytes from /proc (Linux); 0 elsewhere."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _pss(pid: int | str) -> int:
    """Proportional set size of process ``pid`` in bytes (/proc/PID/smaps_rollup, Linux): shared pages split
    among the processes sharing them, so the sum over processes is their joint memory. 0 elsewhere."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def one(n: int, d: int, bits: int, k: int, baseline: int = 0, workers: int = 1) -> dict[str, object]:
    from protocols import InProcessClientPool, min_threshold, run_pooled_round
    from protocols import messages as m
    from protocols.procpool import ProcessClientPool

    t = min_threshold(k + 1, neighbours=k, security="active")
    rng = np.random.default_rng(0)
    seeds = {c: int(s) for c, s in enumerate(rng.integers(0, 1 << 62, size=n))}

    def make(c: int) -> np.ndarray:
        return np.random.default_rng(seeds[c]).integers(0, 1 << bits, size=d, dtype=np.uint64)

    worker_peaks: list[int] = []
    pss: list[int] = []
    if workers > 1:  # forked workers, handed the inputs as one dict (what run_secagg_round does by default)
        pool = ProcessClientPool({c: make(c) for c in seeds}, workers)
    elif baseline:  # the inputs as one dict of uint64 vectors (what the issue measured)
        pool = InProcessClientPool({c: make(c) for c in seeds})
    else:
        pool = InProcessClientPool.lazy(sorted(seeds), make)
    split: list[tuple[str, int, int, int]] = []  # (stage, RSS before its clients, RSS after them, peak so far)
    deliver = pool.deliver

    def metered(stage: str, envelopes):  # type: ignore[no-untyped-def]
        before = _status()[0]
        out = deliver(stage, envelopes)
        split.append((stage, before, *_status()))
        if isinstance(pool, ProcessClientPool):  # joint memory of driver and workers after the clients' part
            pss.append(_pss("self") + sum(_pss(proc.pid) for proc in pool._procs))
        return out

    pool.deliver = metered  # type: ignore[method-assign]
    gone = set(range(0, n, 10))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    res = run_pooled_round(
        pool,
        sorted(seeds),
        d,
        modulus_bits=bits,
        threshold=t,
        neighbours=k,
        dropouts={"masked_input": gone},
        seed=1,
        round_id=bytes(16),
    )
    secs = time.perf_counter() - t0
    if isinstance(pool, ProcessClientPool):
        worker_peaks = [_hwm(proc.pid) for proc in pool._procs]
        pool.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    want = np.zeros(d, dtype=np.uint64)
    for c in sorted(set(seeds) - gone):
        want += make(c)
    assert np.array_equal(res.aggregate, want & np.uint64((1 << bits) - 1)), "aggregate is not exact"
    upload = len(m.MaskedInput(bytes(16), 0, m.SERVER, bits, np.zeros(d, np.uint64)).to_bytes())
    return {
        "n": n,
        "d": d,
        "bits": bits,
        "k": k,
        "t": t,
        "seconds": secs,
        "rss0": rss0,
        "rss": rss + sum(worker_peaks),
        "driver_rss": rss,
        "worker_rss": worker_peaks,
        "pss": max(pss, default=0),
        "upload": upload,
        "split": split,
    }


def simulated(k_participants: int, d: int, k: int, old: int, workers: int) -> dict[str, object]:
    """One simulator crypto round (``aggregate_round``) in this process; ``old``: the concatenating path."""
    import hashlib

    from bench_simulate import crypto_overrides  # the scenario bench_simulate.py times (this script's folder)

    import protocols.procpool as pp
    from simulations import aggregators
    from simulations.clients import blocks_of, chunks_of, run_blocks
    from simulations.config import build_config
    from simulations.executors import InProcessExecutor
    from simulations.runner import aggregate_round, make_task, plan

    cfg = build_config(None, crypto_overrides(k_participants, d, k))
    pp.usable_cores = lambda: workers  # client_pool forks min(workers, K // 256) workers (1: in the driver)
    worker_peaks: list[int] = []
    pss: list[int] = []
    deliver, close = pp.ProcessClientPool.deliver, pp.ProcessClientPool.close

    def metered(self, stage, envelopes):  # type: ignore[no-untyped-def]
        out = deliver(self, stage, envelopes)
        pss.append(_pss("self") + sum(_pss(proc.pid) for proc in self._procs))
        return out

    def closing(self):  # type: ignore[no-untyped-def]
        worker_peaks.extend(_hwm(proc.pid) for proc in self._procs)
        close(self)

    pp.ProcessClientPool.deliver, pp.ProcessClientPool.close = metered, closing  # type: ignore[method-assign]
    if old:  # the code of git rev 26b9ec8: encode every participant, concatenate, hand over every row at once
        real = aggregators.crypto_round_lazy

        def concatenating(ids, make, dim, **kw):  # type: ignore[no-untyped-def]
            parts = InProcessExecutor().map_chunks(run_blocks, make._spec, chunks_of(blocks_of(ids)))
            all_ids = [int(c) for pt in parts for c in pt[0]]
            vectors = np.concatenate([pt[1] for pt in parts])
            aggregators.crypto_round_lazy = real  # crypto_round hands its rows on through the real function
            try:
                return aggregators.crypto_round(all_ids, vectors, **kw)  # (parts stays alive, as it did)
            finally:
                aggregators.crypto_round_lazy = concatenating

        aggregators.crypto_round_lazy = concatenating
    task = make_task(cfg)
    p = plan(cfg, 1, task)
    model = task.init_model(1)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    ra = aggregate_round(cfg, p, 1, 1, model, InProcessExecutor(), "crypto", task)
    secs = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert ra.aggregate is not None, "the round aborted"
    return {
        "participants": len(ra.ids),
        "dim": p.padded_dim,
        "seconds": secs,
        "rss0": rss0,
        "driver_rss": rss,
        "worker_rss": worker_peaks,
        "pss": max(pss, default=0),
        "digest": hashlib.sha256(ra.aggregate.tobytes()).hexdigest(),
    }


def simulate_main(a: argparse.Namespace) -> None:
    d = a.d or 1000
    runs = {}
    for old in (1, 0):
        cmd = [sys.executable, __file__, "--sim-one", str(a.simulate), str(d), str(a.k), str(old), str(a.workers)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        runs[old] = r = json.loads(proc.stdout.strip().splitlines()[-1])
        total = r["driver_rss"] + sum(r["worker_rss"])
        workers = " + ".join(f"{w / 2**20:,.0f}" for w in r["worker_rss"]) or "none"
        print(
            f"{'old (26b9ec8, K x d concatenated)' if old else 'new (block by block)':34s} K={r['participants']:,} "
            f"d={r['dim']:,}: driver peak {r['driver_rss'] / 2**20:,.0f} MiB (before the round "
            f"{r['rss0'] / 2**20:,.0f}), workers' peaks {workers} MiB, sum {total / 2**20:,.0f} MiB"
            + (f", joint PSS after a stage at most {r['pss'] / 2**20:,.0f} MiB" if r["pss"] else "")
            + f"; round {r['seconds']:.1f} s"
        )
    new, old = runs[0], runs[1]
    k, dim = new["participants"], new["dim"]
    tot = {x: r["driver_rss"] + sum(r["worker_rss"]) for x, r in runs.items()}
    print(
        f"new / old: driver peak {new['driver_rss'] / old['driver_rss']:.3f}, driver + workers "
        f"{tot[0] / tot[1]:.3f} (saved {(tot[1] - tot[0]) / 2**20:,.0f} MiB; one K x d uint64 array is "
        f"{k * dim * 8 / 2**20:,.0f} MiB); same aggregate: {new['digest'] == old['digest']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=6, type=int)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--baseline", action="store_true", help="inputs as one dict of uint64 vectors")
    ap.add_argument("--n", type=int)
    ap.add_argument("--d", type=int)
    ap.add_argument("--bits", type=int, default=20)
    ap.add_argument("--workers", type=int, default=1, help="client worker processes (default 1: in-process)")
    ap.add_argument("--simulate", type=int, metavar="K", help="the simulator's crypto round, K participants")
    ap.add_argument("--sim-one", nargs=5, type=int)
    a = ap.parse_args()
    if a.sim_one:
        print(json.dumps(simulated(*a.sim_one)))
        return
    if a.simulate:
        simulate_main(a)
        return
    if a.one:
        print(json.dumps(one(*a.one)))
        return
    configs = [(a.n, a.d, a.bits)] if a.n else [(10_000, 1_000, a.bits), (100, 1_000_000, a.bits)]
    for n, d, bits in configs:
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                str(n),
                str(d),
                str(bits),
                str(a.k),
                str(int(a.baseline)),
                str(a.workers),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        packed = n * d * bits / 8
        raw = d * bits / 8
        print(
            f"n={n:,} d={d:,} bits={bits} k={r['k']} t={r['t']}: peak RSS {r['rss'] / 2**20:,.0f} MiB "
            f"(before the round {r['rss0'] / 2**20:,.0f} MiB; all inputs packed {packed / 2**20:,.0f} MiB, "
            f"peak / packed inputs {r['rss'] / packed:.1f}x); round {r['seconds']:.1f} s; "
            f"MaskedInput {r['upload']:,} B = {r['upload'] / raw:.3f} x raw ({raw:,.0f} B)"
        )
        if r["worker_rss"]:
            print(
                f"  {len(r['worker_rss'])} worker processes: driver peak {r['driver_rss'] / 2**20:,.0f} MiB + "
                f"workers' peaks {' + '.join(f'{w / 2**20:,.0f}' for w in r['worker_rss'])} MiB "
                "(an upper bound: pages shared copy-on-write with the driver are counted in each); joint "
                f"proportional set size after each stage's clients, largest {r['pss'] / 2**20:,.0f} MiB"
            )
        if r["split"]:  # RSS when the stage's downlink reaches the clients / after their replies; peak so far
            print(
                "  stage split (MiB, RSS before -> after the clients' part, peak so far): "
                + "; ".join(
                    f"{st} {a / 2**20:,.0f} -> {b / 2**20:,.0f} ({h / 2**20:,.0f})" for st, a, b, h in r["split"]
                )
            )


if __name__ == "__main__":
    main()
