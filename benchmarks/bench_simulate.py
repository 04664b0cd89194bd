"""What one ``secagg-dp simulate`` round costs, against the floor of summing the same vectors with numpy.

Every case runs the real command line in a fresh process (``secagg-dp simulate ... --json --no-plots``), so the
figures include exactly what users run: check-in and dropout draws, per-client synthetic data, clip, rotation,
randomized rounding, discrete Gaussian noise, the aggregator (ideal modular sum, or the SecAgg(+) protocol),
the ledger commit and the decode. Printed per case: wall time of the process, CPU of the process and its
children (Dask workers), peak RSS, the runner's per-stage seconds of the timed round(s), a finer split of the
client stage measured on one chunk in this process, the floor and the ratio.

Floor, measured in the same run: numpy's float64 ``sum(axis=0)`` over as many d-vectors as the round has
participants, timed as repeated sums of a 16384 x d block of the real client vectors (a block that fits in
cache-friendly memory; the simulator streams blocks too). A second floor: drawing two AES-CTR uniforms per
padded coordinate (randomized rounding and noise need at least that much randomness).

Ideal mode, first row per size: one round in this process (``simulations.runner.aggregate_round``, the function
the command runs, in-process executor) in CPU and wall seconds against the randomness floor timed in the same
process in the same units (CPU is the steadier ratio on a shared machine), with the CPU per participant of each
client stage; runs on the previous revision too, for a same-method "before" (``--no-cli``: only this row).

    python benchmarks/bench_simulate.py                 # ideal n = 10^4, 10^5, 10^6; crypto SecAgg+ n = 10^3
    python benchmarks/bench_simulate.py --dask          # + the same configs on a 2-worker LocalCluster (crypto:
                                                        #   clients on the workers, server on the driver)
    python benchmarks/bench_simulate.py --crypto 1000 10000 --ideal  # choose sizes (empty --ideal: none)
    python benchmarks/bench_simulate.py --startup       # secagg-dp --help, repeated (cold start)
    python benchmarks/bench_simulate.py --ideal --crypto --pool 3000  # client CPU per Dask shard vs in-process
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "import sys; from simulations.cli import main; sys.exit(main())"]
# the same entry point, reporting its own peak RSS and its children's (Dask workers) at exit
_CLI_RSS = (
    "import atexit, resource, sys\n"
    "def _rss():\n"
    "    own, kids = (resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))\n"
    "    print(f'BENCH-RSS {own} {kids}', file=sys.stderr)\n"
    "atexit.register(_rss)\n"
    "from simulations.cli import main\n"
    "sys.exit(main())\n"
)


def ideal_overrides(n: int, dim: int, checkin: float) -> list[str]:
    return [
        "mode=ideal",
        f"population.clients={n}",
        f"population.checkin={checkin}",
        "population.dropout=0.0",
        "secagg.bits=32",
        "privacy.noise_multiplier=4",
        f"task.dim={dim}",
        "rounds=1",
        "seed=1",
    ]


def crypto_overrides(n: int, dim: int, k: int) -> list[str]:
    return [
        "mode=crypto",
        f"population.clients={n}",
        "population.checkin=1.0",
        "population.dropout=0.0",
        "secagg.bits=32",
        "secagg.threshold_fraction=0.5",
        f"secagg.neighbours={k}",
        "privacy.noise_multiplier=4",
        f"task.dim={dim}",
        "rounds=1",
        "seed=1",
    ]


def run_cli(overrides: list[str], extra: list[str], timeout: float) -> dict:
    """Run ``secagg-dp simulate`` in a child process; return its results document plus process figures."""
    out = tempfile.mkdtemp(prefix="bench-sim-")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                _CLI_RSS,
                "simulate",
                *overrides,
                *extra,
                "--out",
                out,
                "--json",
                "--no-plots",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(out, ignore_errors=True)
        return {"timeout": timeout}
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("BENCH-RSS")]
        return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    doc = json.loads(proc.stdout)
    doc["_wall"] = wall
    doc["_cpu"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    own, kids = next(line.split()[1:] for line in proc.stderr.splitlines() if line.startswith("BENCH-RSS"))
    doc["_maxrss_mb"] = int(own) / 1024  # KiB on Linux
    doc["_worker_rss_mb"] = int(kids) / 1024
    return doc


def floor_seconds(participants: int, dim: int) -> float:
    """numpy float64 sum of ``participants`` real client vectors of length ``dim`` (see module docstring)."""
    from simulations.tasks.mean import client_vectors

    m = min(participants, 16384)
    x = client_vectors(1, np.arange(m), dim, 1.0)
    reps, rest = divmod(participants, m)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            x.sum(axis=0)
        if rest:
            x[:rest].sum(axis=0)
        best = min(best, time.perf_counter() - t)
    return best


def randomness_floor_seconds(participants: int, padded_dim: int) -> float:
    """Drawing two AES-CTR uniforms per padded coordinate: the least any private round must do (one for the
    randomized rounding, at least one for the noise), timed on a 256 x d block and scaled to the round."""
    from simulations.clients import block_rng

    rng = block_rng(1, 1, 0)
    out = np.empty((256, padded_dim))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        rng.random(out=out)
        rng.random(out=out)
        best = min(best, time.perf_counter() - t)
    return best * participants / 256


def _round_config(n: int, dim: int, checkin: float):  # noqa: ANN202
    from simulations.config import build_config

    return build_config(
        {
            "mode": "ideal",
            "seed": 1,
            "rounds": 1,
            "population": {"clients": n, "checkin": checkin, "dropout": 0.0},
            "secagg": {"bits": 32},
            "privacy": {"noise_multiplier": 4.0},
            "task": {"name": "mean", "dim": dim},
        }
    )


def client_split(dim: int, n: int, checkin: float = 0.5) -> dict[str, float]:
    """CPU seconds per participant of each client stage, timed on one block of real ids in this process, as
    the round runs them: data; per-client noise (only where the round draws it per client); clip, rotate,
    scale, conditional rounding and the block's modular sum (``ZqCodec.encode_sum``); the aggregate noise
    draw of the round (once per round, shown per participant of a round of ``n * checkin``)."""
    from secagg_dp import zq
    from simulations.clients import BLOCK, block_rng, draw_noise, make_codec
    from simulations.runner import plan
    from simulations.tasks.mean import client_vectors

    try:  # the allocator setting the round applies (absent before it existed)
        from simulations.clients import tune_allocator

        tune_allocator()
    except ImportError:
        pass
    cfg = _round_config(n, dim, checkin)
    p = plan(cfg, 1)
    codec = make_codec(p.dim, 32, 1.0, p.scale, 12345, cfg.privacy.beta)
    ids = np.arange(BLOCK) * max(1, n // BLOCK)
    keep = np.ones(BLOCK, dtype=bool)
    participants = max(1, round(n * checkin))
    try:
        from simulations.runner import aggregate_noise_groups

        per_client_noise = aggregate_noise_groups(cfg, p, participants) is None
    except ImportError:  # before the aggregate draw: every client draws its own noise
        aggregate_noise_groups = None
        per_client_noise = True
    split = dict.fromkeys(["data", "noise", "clip+rotate+round+sum"], float("inf"))
    for _ in range(5):
        rng = block_rng(1, 1, 0)
        t = time.process_time()
        x = client_vectors(1, ids, dim, 1.0)
        t1 = time.process_time()
        noise = None
        if per_client_noise:
            noise = draw_noise("ddg", p.sigma_int, BLOCK * p.padded_dim, rng).reshape(BLOCK, -1)
        t2 = time.process_time()
        if hasattr(codec, "encode_sum"):
            codec.encode_sum(x, keep=keep, noise=noise, rng=rng)
        else:
            zq.sum_mod(codec.encode(x, noise=noise, rng=rng), 32)
        t3 = time.process_time()
        for key, dt in zip(split, (t1 - t, t2 - t1, t3 - t2), strict=True):
            split[key] = min(split[key], dt / BLOCK)
    if not per_client_noise:
        from secagg_dp.noise.aggregate import sample_noise_sum

        t = time.process_time()
        sample_noise_sum("ddg", p.sigma_int, participants, p.padded_dim, rng=block_rng(1, 1, 1))
        split["noise"] = (time.process_time() - t) / participants
    return split


def inprocess_round(n: int, dim: int, checkin: float) -> dict[str, float]:
    """One ideal round in this process (``simulations.runner.aggregate_round``, the function the command runs,
    in-process executor), wall and CPU seconds, with the randomness floor timed just before and after in both
    units (the lower of the two floor measurements)."""
    from simulations.executors import InProcessExecutor
    from simulations.runner import aggregate_round, plan

    small = _round_config(2000, dim, checkin)  # warm-up on a small round: imports, caches (not timed)
    aggregate_round(small, plan(small, 1), 1, 1, None, InProcessExecutor(), "ideal")
    cfg = _round_config(n, dim, checkin)
    p = plan(cfg, 1)
    floors = [randomness_floor(p.padded_dim)]
    w, c = time.perf_counter(), time.process_time()
    ra = aggregate_round(cfg, p, 1, 2, None, InProcessExecutor(), "ideal")
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    floors.append(randomness_floor(p.padded_dim))
    k = len(ra.ids)
    return {
        "participants": k,
        "wall": wall,
        "cpu": cpu,
        "floor_wall": min(f[0] for f in floors) * k,
        "floor_cpu": min(f[1] for f in floors) * k,
        "client_noise": float(getattr(ra.spec, "client_noise", True)),
    }


def randomness_floor(padded_dim: int, rows: int = 256, reps: int = 5) -> tuple[float, float]:
    """Seconds (wall, CPU) per participant of drawing two AES-CTR uniforms per padded coordinate (best of reps)."""
    from simulations.clients import block_rng

    rng = block_rng(1, 1, 0)
    out = np.empty((rows, padded_dim))
    wall = cpu = float("inf")
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        rng.random(out=out)
        rng.random(out=out)
        wall, cpu = min(wall, time.perf_counter() - w), min(cpu, time.process_time() - c)
    return wall / rows, cpu / rows


def report_inprocess(label: str, r: dict[str, float], split: dict[str, float] | None) -> None:
    print(f"\n{label}")
    k = int(r["participants"])
    print(
        f"  participants {k}; round wall {r['wall']:.2f} s, CPU {r['cpu']:.2f} s "
        f"({1e6 * r['cpu'] / k:.1f} us CPU per participant); noise "
        + ("per client" if r["client_noise"] else "one aggregate draw")
    )
    if split is not None:
        per = sum(split.values())
        print(
            "  stages, CPU per participant (one block, this process): "
            + ", ".join(f"{key} {v * 1e6:.1f} us ({100 * v / per:.0f} %)" for key, v in split.items())
        )
        rest = r["cpu"] / k - per
        print(
            "  rest of the round (block generators, row checks, truth sums, cold caches, check-in, decode): "
            + (
                f"{rest * 1e6:.1f} us per participant"
                if rest >= 0
                else "not measured (the one-block split ran slower than the round: the machine's load changed)"
            )
            + f"; floor {r['floor_cpu'] / k * 1e6:.2f} us per participant"
        )
    print(
        "  randomness floor (2 AES-CTR uniforms per coordinate) "
        f"CPU {r['floor_cpu']:.2f} s, wall {r['floor_wall']:.2f} s"
    )
    print(f"  round / randomness floor: CPU {r['cpu'] / r['floor_cpu']:.1f}x, wall {r['wall'] / r['floor_wall']:.1f}x")


def report(label: str, doc: dict, dim: int, split: dict[str, float] | None) -> None:
    print(f"\n{label}")
    if "timeout" in doc or "error" in doc:
        print(f"  not measured: {doc}")
        return
    rnd = doc["rounds"][0]
    participants = rnd["checked_in"]
    secs = rnd["seconds"]
    base = floor_seconds(participants, dim)
    print(
        f"  participants {participants}, d = {dim}; process wall {doc['_wall']:.2f} s, CPU (incl. workers) "
        f"{doc['_cpu']:.2f} s, peak RSS {doc['_maxrss_mb']:.0f} MB"
        + (f" (largest worker {doc['_worker_rss_mb']:.0f} MB)" if doc["_worker_rss_mb"] > 0 else "")
    )
    for key in ("checkin", "clients", "secagg", "account", "decode"):
        if key in secs:
            print(f"  {key:<10} {secs[key]:9.3f} s   {100 * secs[key] / secs['total']:5.1f} %")
    print(
        f"  {'round':<10} {secs['total']:9.3f} s   -> {participants / secs['total']:,.0f} clients/s; "
        f"outside the round (start-up, accountant, files) {doc['_wall'] - secs['total']:.2f} s"
    )
    if split is not None:
        per = sum(split.values())
        print(
            "  client stage, CPU per participant (one block, this process): "
            + ", ".join(f"{k} {v * 1e6:.1f} us ({100 * v / per:.0f} %)" for k, v in split.items())
        )
    padded = 1 << (dim - 1).bit_length()
    rnd_floor = randomness_floor_seconds(participants, padded)
    print(
        f"  floor (numpy float64 sum of {participants} x {dim}) {base * 1e3:.1f} ms; "
        f"round / floor = {secs['total'] / base:,.0f}x"
    )
    print(
        f"  randomness floor (2 AES-CTR uniforms per coordinate, {participants} x {padded}) {rnd_floor * 1e3:.1f} ms "
        f"= {rnd_floor / base:.1f}x the sum floor; round / randomness floor = {secs['total'] / rnd_floor:,.1f}x"
    )


def compare(local: dict, dist: dict) -> None:
    """In-process against Dask, same run: wall and CPU ratios, and whether the released results agree."""
    if any(k in d for d in (local, dist) for k in ("timeout", "error")):
        return
    a, b = local["rounds"][0], dist["rounds"][0]
    same = {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    print(
        f"  in-process / Dask: round {a['seconds']['total'] / b['seconds']['total']:.2f}x, process wall "
        f"{local['_wall'] / dist['_wall']:.2f}x, CPU {local['_cpu'] / dist['_cpu']:.2f}x; same round record "
        f"(metrics, counts): {same}"
    )


def random_rows(ids: list[int], dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Shard loader for ``--pool``: uniform 32-bit inputs regenerated from (seed, first id) on the worker."""
    rng = np.random.default_rng([seed, ids[0]])
    return np.asarray(ids, dtype=np.int64), rng.integers(0, 1 << 32, (len(ids), dim), dtype=np.uint64)


def pool_split(n: int, dim: int, k: int) -> None:
    """One SecAgg+ round (``protocols.run_pooled_round``) with every client in this process, then with the
    clients on a 2-worker LocalCluster (started and warmed up before timing). Same inputs, seed and round id;
    prints the clients' thread CPU per stage (in-process against each shard), the driver's CPU and the wall."""
    from protocols import InProcessClientPool, run_pooled_round
    from secagg_dp.crypto.shamir import field
    from simulations.executors import DaskExecutor

    class Timed(InProcessClientPool):
        cpu: dict[str, float] = {}

        def deliver(self, stage, envelopes):  # noqa: ANN001, ANN202
            t = time.thread_time()
            out = super().deliver(stage, envelopes)
            self.cpu[stage] = time.thread_time() - t
            return out

    ids = list(range(n))
    halves = [ids[: n // 2], ids[n // 2 :]]
    inputs = {}
    for part in halves:
        inputs.update(zip(part, random_rows(part, dim, 7)[1], strict=True))
    kw = dict(bits=32, threshold=k // 2 + 1, neighbours=k, seed=3, round_id=b"bench-pool-split")
    field()
    pool = Timed(inputs)
    c0, t0 = time.process_time(), time.perf_counter()
    ref = run_pooled_round(pool, ids, dim, **kw)
    local_wall, local_cpu = time.perf_counter() - t0, time.process_time() - c0
    del inputs
    with DaskExecutor("", n_workers=2) as ex:
        ex._client.run(field)  # the GF(65537) warm-up, paid once per process, outside the timing
        c0, t0 = time.process_time(), time.perf_counter()
        with ex.client_pool([(random_rows, (part, dim, 7)) for part in halves]) as dp:
            got = run_pooled_round(dp, ids, dim, **kw)
            shards = dp.cpu_seconds()
        dask_wall, driver_cpu = time.perf_counter() - t0, time.process_time() - c0
    same = got.aggregate.tolist() == ref.aggregate.tolist() and got.survivors == ref.survivors
    print(f"\nclient pool, SecAgg+ k = {k}, n = {n}, d = {dim}: identical aggregate and survivors: {same}")
    print(f"  {'stage':<16}{'in-process':>12}" + "".join(f"{f'shard {i}':>10}" for i in range(len(shards))))
    for stage in pool.cpu:
        print(f"  {stage:<16}{pool.cpu[stage]:11.2f}s" + "".join(f"{sh.get(stage, 0.0):9.2f}s" for sh in shards))
    total = sum(pool.cpu.values())
    per = [sum(sh.values()) for sh in shards]
    print(
        f"  {'clients':<16}{total:11.2f}s"
        + "".join(f"{p:9.2f}s" for p in per)
        + f"   shards together {sum(per) / total:.2f}x the in-process client CPU, largest shard {max(per) / total:.2f}x"
    )
    print(
        f"  in-process: wall {local_wall:.2f} s, CPU {local_cpu:.2f} s (server {local_cpu - total:.2f} s); Dask: wall "
        f"{dask_wall:.2f} s (shards built inside), driver CPU {driver_cpu:.2f} s; wall in-process / Dask "
        f"{local_wall / dask_wall:.2f}x"
    )


def startup(reps: int = 10) -> None:
    """Hyperfine-like: ``secagg-dp --help`` and ``simulate --help`` against ``python -c pass``, same run."""

    def timed(cmd: list[str]) -> tuple[float, float]:
        runs = []
        for _ in range(reps):
            t = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=True, cwd=ROOT)
            runs.append(time.perf_counter() - t)
        return float(np.mean(runs)), float(np.min(runs))

    base = timed([sys.executable, "-c", "pass"])
    print(f"\ncold start, {reps} runs each (mean / min):")
    print(f"  python -c pass              {base[0] * 1e3:7.1f} / {base[1] * 1e3:7.1f} ms")
    for args in (["--help"], ["simulate", "--help"], ["account", "checkin", "--help"]):
        mean, best = timed([*CLI, *args])
        print(
            f"  secagg-dp {' '.join(args):<17} {mean * 1e3:7.1f} / {best * 1e3:7.1f} ms   "
            f"(+{(mean - base[0]) * 1e3:.1f} ms over the bare interpreter)"
        )
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "from secagg_dp.crypto.shamir import field; field(); field()"], check=True, cwd=ROOT
    )
    print(f"  GF(65537) first use in a process (build the log tables once): {time.perf_counter() - t:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ideal", type=int, nargs="*", default=[10_000, 100_000, 1_000_000], metavar="N")
    ap.add_argument("--crypto", type=int, nargs="*", default=[1000], metavar="N", help="SecAgg+ sizes (10000: slow)")
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--checkin", type=float, default=0.5, help="ideal mode check-in rate p")
    ap.add_argument("--neighbours", type=int, default=32, help="SecAgg+ k")
    ap.add_argument("--dask", action="store_true", help="also run every case on a 2-worker LocalCluster")
    ap.add_argument("--startup", action="store_true", help="only the cold-start figures")
    ap.add_argument(
        "--pool",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="SecAgg+ round on the in-process vs the Dask client pool: client CPU per stage and shard",
    )
    ap.add_argument("--timeout", type=float, default=3600.0, help="per case, seconds")
    ap.add_argument("--no-cli", action="store_true", help="ideal: only the round in this process (no command)")
    ap.add_argument("--no-inprocess", action="store_true", help="ideal: only the command in a fresh process")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}")
    if args.startup:
        startup()
        return
    for n in args.pool:
        pool_split(n, args.dim, args.neighbours)
    for n in args.ideal:
        split = client_split(args.dim, n, args.checkin)
        if not args.no_inprocess:
            r = inprocess_round(n, args.dim, args.checkin)
            report_inprocess(f"ideal round in this process (aggregate_round): n = {n}, p = {args.checkin}", r, split)
        if args.no_cli:
            continue
        doc = run_cli(ideal_overrides(n, args.dim, args.checkin), [], args.timeout)
        report(f"ideal, in-process: n = {n}, p = {args.checkin}", doc, args.dim, split)
        if args.dask:
            doc = run_cli(ideal_overrides(n, args.dim, args.checkin), ["--executor", "dask"], args.timeout)
            report(f"ideal, Dask LocalCluster (2 workers): n = {n}, p = {args.checkin}", doc, args.dim, None)
    for n in args.crypto:
        doc = run_cli(crypto_overrides(n, args.dim, args.neighbours), [], args.timeout)
        report(f"crypto SecAgg+ (k = {args.neighbours}), in-process: n = {n}", doc, args.dim, None)
        if args.dask:
            dist = run_cli(crypto_overrides(n, args.dim, args.neighbours), ["--executor", "dask"], args.timeout)
            label = f"crypto SecAgg+ (k = {args.neighbours}), Dask LocalCluster (2 workers): n = {n}"
            report(label, dist, args.dim, None)
            compare(doc, dist)


if __name__ == "__main__":
    main()
