"""``secagg-dp verify``: run the randomized checks of :mod:`simulations.verify` and print a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from simulations.cli._args import Subparsers, int_in

#: Cap on --trials: one trial of every check takes several seconds, so 100 trials already take minutes.
MAX_TRIALS = 100

__all__ = ["register"]


def _handler(args: argparse.Namespace) -> int:
    from simulations.verify import CHECKS, format_table, run_checks

    rows = []
    for i, check in enumerate(CHECKS, 1):
        if args.trials > 2:  # long runs report progress on stderr
            print(f"secagg-dp: verify: check {i}/{len(CHECKS)} ({check.__name__})", file=sys.stderr, flush=True)
        rows.extend(run_checks([check], seed=args.seed, trials=args.trials))
    failed = sum(1 for r in rows if not r[2])
    if args.json:
        print(
            json.dumps(
                {
                    "rows": [{"name": n, "params": p, "passed": bool(ok), "detail": d} for n, p, ok, d in rows],
                    "passed": len(rows) - failed,
                    "failed": failed,
                    "ok": failed == 0,
                },
                indent=2,
                default=str,
            )
        )
    else:
        print(format_table(rows))
    return 0 if failed == 0 else 1


def register(subparsers: Subparsers) -> None:
    """Add the ``verify`` subcommand."""
    help_text = "randomized end-to-end checks: clip, encode, noise, modular sum, decode vs the plain sum"
    p = subparsers.add_parser("verify", help=help_text, description=help_text)
    p.add_argument("--seed", type=int_in(0), default=0, help="seed of the check generators (default 0)")
    p.add_argument(
        "--trials",
        type=int_in(1, MAX_TRIALS),
        default=2,
        help=f"random repetitions per check, at most {MAX_TRIALS} (default 2; each trial takes seconds)",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    p.set_defaults(handler=_handler)
