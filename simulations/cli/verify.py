"""``secagg-dp verify``: run the randomized checks of :mod:`simulations.verify` and print a table or JSON."""

from __future__ import annotations

import argparse
import json

__all__ = ["register"]


def _handler(args: argparse.Namespace) -> int:
    from simulations.verify import format_table, run_checks

    rows = run_checks(seed=args.seed, trials=args.trials)
    failed = sum(1 for r in rows if not r[2])
    if args.json:
        print(json.dumps({
            "rows": [{"name": n, "params": p, "passed": bool(ok), "detail": d} for n, p, ok, d in rows],
            "passed": len(rows) - failed,
            "failed": failed,
            "ok": failed == 0,
        }, indent=2, default=str))
    else:
        print(format_table(rows))
    return 0 if failed == 0 else 1


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {value}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``verify`` subcommand."""
    help_text = "randomized end-to-end checks: clip, encode, noise, modular sum, decode vs the plain sum"
    p = subparsers.add_parser("verify", help=help_text, description=help_text)
    p.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the check generators (default 0)")
    p.add_argument("--trials", type=_positive_int, default=2, help="random repetitions per check (default 2)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    p.set_defaults(handler=_handler)
