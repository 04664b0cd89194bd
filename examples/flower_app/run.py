"""Federated least squares in Flower's Simulation Engine with our secure aggregation and discrete noise.

Needs the flower extra (``pip install 'secagg-dp[flower]'``, which brings ``flwr[simulation]``). Run:

    python examples/flower_app/run.py [--nodes 8] [--sample 6] [--rounds 3] [--seed 1] [--out DIR]

Each round the ServerApp samples m of N nodes, each sampled ClientApp trains locally and our Mod clips,
encodes onto Z_q, adds discrete Gaussian noise and masks; the ServerApp unmasks the sum, decodes it, spends the
round in the privacy ledger and prints the certified epsilon for the analyst and for the server.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8, help="N, Flower nodes (one partition each)")
    ap.add_argument("--sample", type=int, default=6, help="m, nodes sampled per round")
    ap.add_argument("--threshold", type=int, default=None, help="t (default: floor(2m/3) + 1)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bits", type=int, default=20)
    ap.add_argument("--mechanism", choices=("ddg", "skellam"), default="ddg")
    ap.add_argument("--security", choices=("semi-honest", "active"), default="semi-honest")
    ap.add_argument("--neighbours", type=int, default=None, help="SecAgg+ degree k (default: full graph)")
    ap.add_argument(
        "--min-roster", type=int, default=None, help="smallest roster a client accepts (needed: active with k)"
    )
    ap.add_argument("--z", type=float, default=1.0, help="noise multiplier: the m clients' noise has std z*clip")
    ap.add_argument("--seed", type=int, default=None, help="simulation only: reproducible keys and noise")
    ap.add_argument("--fail", default="", help="partition ids (comma-separated) whose train fails: dropouts")
    ap.add_argument("--out", default=None, help="folder for rounds.json and ledger.sqlite")
    args = ap.parse_args(argv)
    os.environ.update(
        FLOWER_APP_N=str(args.nodes),
        FLOWER_APP_M=str(args.sample),
        FLOWER_APP_T=str(args.threshold or 2 * args.sample // 3 + 1),
        FLOWER_APP_ROUNDS=str(args.rounds),
        FLOWER_APP_BITS=str(args.bits),
        FLOWER_APP_Z=str(args.z),
        FLOWER_APP_MECHANISM=args.mechanism,
        FLOWER_APP_SECURITY=args.security,
        FLOWER_APP_SEED="" if args.seed is None else str(args.seed),
        FLOWER_APP_NEIGHBOURS="" if args.neighbours is None else str(args.neighbours),
        FLOWER_APP_MIN_ROSTER="" if args.min_roster is None else str(args.min_roster),
        FLOWER_APP_OUT=args.out or "",
        FLOWER_APP_FAIL=args.fail,
        # the app's modules and the package must be importable in the Simulation Engine's workers
        PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    sys.path[:0] = [str(HERE), str(HERE.parents[1])]
    from client_app import app as client_app
    from flwr.simulation import run_simulation
    from server_app import app as server_app

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=args.nodes,
        # one worker process for the ClientApps: this example is small, and the machine may be too
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 1}},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
