"""Federated least squares in Flower's Simulation Engine with our secure aggregation and discrete noise.

Needs the flower extra (``pip install 'secagg-dp[flower]'``, which brings ``flwr[simulation]``). Run:

    python examples/flower_app/run.py [--nodes 8] [--sample 6] [--rounds 3] [--seed 1] [--out DIR]

Each round the ServerApp samples m of N nodes, each sampled ClientApp trains locally and our Mod clips,
encodes onto Z_q, adds discrete Gaussian noise and masks; the ServerApp unmasks the sum, decodes it, spends the
round in the privacy ledger and prints the certified epsilon for the analyst and for the server.

Bad arguments (e.g. ``--sample`` above ``--nodes``, a threshold above the sample, ``--z`` not positive, an
``--out`` that is a file) are refused with one line and exit code 2 before Flower starts; ``--out`` is created
if it does not exist, as ``secagg-dp simulate --out`` does.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: FlowerDPConfig's argument names -> this script's flags (for the error messages).
FLAGS = {
    "population": "--nodes",
    "sample_size": "--sample",
    "threshold": "--threshold",
    "noise_multiplier": "--z",
    "bits": "--bits",
    "neighbours": "--neighbours",
    "min_roster": "--min-roster",
    "seed": "--seed",
    "mechanism": "--mechanism",
    "security": "--security",
}


def check_args(args: argparse.Namespace) -> Any:
    """The run's :class:`simulations.flower.FlowerDPConfig` from the parsed flags, or a ParameterError naming
    the flag and what it must be. Pure: needs neither Flower nor a folder (see :func:`prepare_out`)."""
    from secagg_dp.errors import ParameterError
    from simulations.flower.core import FlowerDPConfig

    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from task import DIM

    if args.rounds < 1:
        raise ParameterError(f"Argument '--rounds' must be an integer >= 1, not {args.rounds}.")
    try:
        fail = [int(p) for p in args.fail.split(",") if p.strip()]
    except ValueError:
        raise ParameterError(f"Argument '--fail' must be comma-separated partition ids, not {args.fail!r}.") from None
    if any(not 0 <= p < args.nodes for p in fail):
        raise ParameterError(f"Argument '--fail' must name partition ids in [0, {args.nodes - 1}], not {args.fail!r}.")
    try:
        return FlowerDPConfig(
            dim=DIM,
            clip=1.0,
            noise_multiplier=args.z,
            sample_size=args.sample,
            population=args.nodes,
            threshold=default_threshold(args),
            bits=args.bits,
            mechanism=args.mechanism,
            security=args.security,
            seed=args.seed,
            neighbours=args.neighbours,
            min_roster=args.min_roster,
        )
    except ParameterError as exc:
        msg = str(exc)
        for name, flag in FLAGS.items():
            msg = msg.replace(f"Argument '{name}'", f"Argument '{flag}'")
        raise ParameterError(msg) from None


def default_threshold(args: argparse.Namespace) -> int:
    """t: ``--threshold``, or floor(2m/3) + 1 for m = ``--sample``."""
    return int(args.threshold) if args.threshold is not None else 2 * args.sample // 3 + 1


def prepare_out(out: str | None) -> None:
    """Create the ``--out`` folder (and its parents) and prove it writable, or a ParameterError naming it."""
    import tempfile

    from secagg_dp.errors import ParameterError

    if out is None:
        return
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ParameterError(f"Argument '--out' must be a folder (new or existing), not the existing file {out!r}.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ParameterError(
            f"Argument '--out' must be a folder that can be created and written, not {out!r} ({exc.strerror or exc})."
        ) from None


def build_parser() -> argparse.ArgumentParser:
    """The script's flags (errors: one line, exit code 2)."""
    from simulations.cli._args import OneLineParser

    ap = OneLineParser(prog="run.py", description=(__doc__ or "").splitlines()[0])
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
    ap.add_argument("--out", default=None, help="folder for rounds.json and ledger.sqlite (created if missing)")
    return ap


def main(argv: list[str] | None = None) -> int:
    sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # the app's modules, and the package from a source tree
    import importlib.util

    from secagg_dp.errors import ParameterError

    ap = build_parser()
    args = ap.parse_args(argv)
    try:  # every argument, and the output folder, before Flower starts (its start alone takes ~30 s)
        check_args(args)
        if importlib.util.find_spec("flwr") is None:
            ap.exit(2, "run.py: error: 'flwr' is needed: install the flower extra, pip install 'secagg-dp[flower]'\n")
        prepare_out(args.out)
    except ParameterError as exc:
        ap.error(str(exc))
    os.environ.update(
        FLOWER_APP_N=str(args.nodes),
        FLOWER_APP_M=str(args.sample),
        FLOWER_APP_T=str(default_threshold(args)),
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
