"""The Flower path's round time against the same round of ours in one process.

Flower side: ``examples/flower_app/run.py`` in Flower's Simulation Engine (Ray, one worker process for the
ClientApps), N = m nodes, the wall time of ``SecAggDPWorkflow.run_round`` as the ServerApp measures it (local
training, encoding and noise, every protocol stage as Flower messages, the clients' replay of earlier stages,
decoding and the ledger spend; Ray's start-up is not counted). Baseline, measured in the same run: the same
round with every party in this process, ``protocols.run_secagg_round`` on the same clients' encoded updates
(same n, dimension, bits, threshold and security mode) plus the encoding itself.

Run: python benchmarks/bench_flower_path.py [--nodes 8] [--rounds 3] [--security semi-honest]
(needs the flower extra; without flwr it says so and exits 0).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "examples" / "flower_app"


def ours(n: int, rounds: list[dict], security: str, threshold: int) -> float:
    """Median seconds of the in-process round (encode every client, then run_secagg_round)."""
    sys.path.insert(0, str(APP))
    from task import DIM, local_train

    from protocols import run_secagg_round
    from simulations.flower import FlowerDPConfig, client_generator, encode_update

    cfg = FlowerDPConfig(
        dim=DIM, clip=1.0, noise_multiplier=1.0, sample_size=n, population=n, threshold=threshold, security=security
    )
    times = []
    for rec in rounds:
        w = np.asarray(rec["model"])
        t0 = time.perf_counter()
        inputs = {p + 1: encode_update(cfg, local_train(w, p) - w, client_generator(None, 0, 0)) for p in range(n)}
        run_secagg_round(inputs, bits=cfg.bits, threshold=threshold, security=security)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--security", choices=("semi-honest", "active"), default="semi-honest")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("flwr") is None:
        print("bench_flower_path: flwr is not installed; skipped (pip install 'secagg-dp[flower]')")
        return 0
    t = 2 * args.nodes // 3 + 1
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(APP / "run.py"), "--nodes", str(args.nodes), "--sample", str(args.nodes)]
        cmd += ["--threshold", str(t), "--rounds", str(args.rounds), "--security", args.security, "--out", tmp]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
        rounds = json.loads((Path(tmp) / "rounds.json").read_text())
    flower = statistics.median(r["seconds"] for r in rounds[1:] or rounds)  # the first round warms up the workers
    base = ours(args.nodes, rounds, args.security, t)
    print(
        f"Flower path, N = m = {args.nodes}, t = {t}, {args.security}: {flower:.3f} s per round (median of "
        f"{max(len(rounds) - 1, 1)}); same round in one process: {base:.3f} s; ratio {flower / base:.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
