"""Peak memory of the secure-aggregation round users run: ``simulate mode=crypto``, measured on the command.

Default: the command ``python -m simulations.cli simulate --no-plots mode=crypto population.clients=N
population.checkin=1.0 population.dropout=0.0 secagg.bits=B secagg.neighbours=K task.dim=D rounds=1 seed=1``
(what ``secagg-dp simulate`` runs: the mean task, every client checking in, SecAgg+ of degree k, active mode),
each in a fresh child process whose peak RSS is read with ``getrusage(RUSAGE_CHILDREN)`` (what ``/usr/bin/time
-v`` reports as its maximum resident set size: the largest process of the command's tree), for n = 100 at
d = 10^5 and d = 10^6 (``--clients``, ``--d`` to choose), 20 bits, k = 32. Baselines measured in the same run:
the packed input of all clients (n d bits / 8 bytes, what the clients must hold at least) and the same
command at d = 16 (interpreter, libraries, accountant: what does not grow with d); with ``--old``, also the
same command with the crypto mode's inputs encoded as before (a whole block of participants at once,
``simulations.clients.run_blocks``, the encoder the ideal mode runs, and the truth summed a block at a time: the
path that peaked at 5.3 GB at n = 100, d = 10^6), whose results.json must equal the new one (timings aside).
Printed: peak RSS, its ratio to the packed input (target <= 6x, 1.5 GB at d = 10^6; 400 MB at d = 10^5), new /
old, and the command's seconds.

``--protocol``: the protocol round alone (``protocols.run_pooled_round`` on an
:class:`~protocols.InProcessClientPool` whose clients build their inputs one at a time from a seeded generator),
SecAgg+ with degree k (default 32) and the smallest threshold an active client accepts, active mode, 10 % of the
clients silent from the masked-input stage on, each configuration in a fresh process (default: n = 10^4,
d = 10^3 and n = 100, d = 10^6 at 20 bits; ``--n N --d D --bits B --k K``); printed per configuration: the peak
RSS against the RSS before the round, the packed input, the MaskedInput size against the raw vector (d bits / 8)
and the stage split (Linux /proc). With ``--workers W`` (W >= 2) the clients run in W forked worker processes
(``protocols.ProcessClientPool``), handed all inputs as one dict; the peak printed is then the driver's plus
each worker's (``VmHWM``), an upper bound. ``--baseline`` hands the in-process pool all inputs as one dict.

Run: python benchmarks/bench_round_memory.py [--clients N] [--d D ...] [--bits B] [--k K] [--old]
     python benchmarks/bench_round_memory.py --protocol [--n N --d D --bits B --k K] [--baseline] [--workers W]
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
    elif baseline:  # the inputs as one dict of uint64 vectors (as a caller of run_secagg_round)
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
        bits=bits,
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


_MEASURE = (  # run argv[1:] as a child and print its peak RSS in bytes (the largest process of its tree)
    "import json, resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
    "print(json.dumps(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))"
)
_OLD = (  # the command with the crypto inputs encoded a whole block at a time (the encoder before the batched one)
    "import sys\n"
    "import simulations.clients as sc\n"
    "from protocols import wire\n"
    "def whole(spec, block):\n"
    "    ids, rows, _ = sc.run_blocks(spec, [block])\n"
    "    return {int(c): wire.pack_residues(r, spec.bits) for c, r in zip(ids, rows)}\n"
    "sc.encode_block_packed, sc.ROW_VALUES = whole, 1 << 62\n"
    "from simulations.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def command(n: int, d: int, bits: int, k: int, out: str) -> list[str]:
    """The simulate command measured (the arguments after ``python -m simulations.cli``)."""
    return [
        "simulate",
        "--no-plots",
        "mode=crypto",
        f"population.clients={n}",
        "population.checkin=1.0",
        "population.dropout=0.0",
        f"secagg.bits={bits}",
        f"secagg.neighbours={k}",
        f"task.dim={d}",
        "rounds=1",
        "seed=1",
        "--out",
        out,
    ]


def peak_rss(argv: list[str]) -> tuple[int, float]:
    """Peak RSS in bytes of ``argv`` run as a child (of a child), and its wall seconds."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True)
    return int(proc.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def _results(out: str) -> object:
    """results.json of a run without its timings and software versions (what must not differ)."""

    def strip(x: object) -> object:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("seconds", "software")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    with open(f"{out}/results.json") as f:
        return strip(json.load(f))


def command_main(a: argparse.Namespace) -> None:
    import tempfile

    dims = [a.d] if a.d else [100_000, 1_000_000]
    with tempfile.TemporaryDirectory(prefix="bench-mem-") as tmp:
        base, _ = peak_rss([sys.executable, "-m", "simulations.cli", *command(a.clients, 16, a.bits, a.k, tmp)])
    print(f"baseline: the same command at d = 16 (interpreter, libraries, accountant) peaks at {base / 2**20:,.0f} MiB")
    for d in dims:
        with tempfile.TemporaryDirectory(prefix="bench-mem-") as tmp:
            new, secs = peak_rss(
                [sys.executable, "-m", "simulations.cli", *command(a.clients, d, a.bits, a.k, tmp + "/new")]
            )
            packed = a.clients * d * a.bits / 8
            line = (
                f"simulate mode=crypto n={a.clients} d={d:,} bits={a.bits} k={a.k}: peak RSS {new / 2**20:,.0f} MiB "
                f"= {new / 1e9:.2f} GB; all inputs packed {packed / 2**20:,.0f} MiB, peak / packed "
                f"{new / packed:.1f}x; command {secs:.1f} s"
            )
            if a.old:
                old, old_secs = peak_rss(
                    [sys.executable, "-c", _OLD, *command(a.clients, d, a.bits, a.k, tmp + "/old")]
                )
                same = _results(tmp + "/new") == _results(tmp + "/old")
                line += (
                    f"; old path (whole-block encode) {old / 2**20:,.0f} MiB ({old / packed:.1f}x packed, "
                    f"{old_secs:.1f} s): new / old {new / old:.3f}; same results.json: {same}"
                )
            print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=6, type=int)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--baseline", action="store_true", help="inputs as one dict of uint64 vectors")
    ap.add_argument("--n", type=int)
    ap.add_argument("--d", type=int)
    ap.add_argument("--bits", type=int, default=20)
    ap.add_argument("--workers", type=int, default=1, help="client worker processes (default 1: in-process)")
    ap.add_argument("--protocol", action="store_true", help="the protocol round alone (run_pooled_round)")
    ap.add_argument("--clients", type=int, default=100, help="the command's population.clients (default 100)")
    ap.add_argument("--old", action="store_true", help="also the command with the whole-block encoder (heavy)")
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(*a.one)))
        return
    if not a.protocol:
        command_main(a)
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
