"""The ``secagg-dp`` command line.

Subcommands are contributed by small modules, each exposing ``register(subparsers)`` (or, for the
``account``/``calibrate`` groups, ``register_account`` / ``register_calibrate``) that adds its parsers and
sets ``handler=callable(args) -> int`` as a default. Registration modules import heavy dependencies
inside their handlers only, so ``secagg-dp --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from secagg_dp import __version__
from secagg_dp.errors import SecAggDPError
from simulations.cli._args import OneLineParser, Subparsers

# (module, function, group): group None registers a top-level subcommand.
_REGISTRY: tuple[tuple[str, str, str | None], ...] = (
    ("simulations.cli.simulate", "register", None),
    ("simulations.cli.verify", "register", None),
    ("simulations.cli.ledger", "register", None),
    ("simulations.cli.audit", "register", None),
    ("simulations.cli.account", "register_account", "account"),
    ("simulations.cli.account_checkin", "register_account", "account"),
    ("simulations.cli.account_shuffle", "register_account", "account"),
    ("simulations.cli.account_random", "register_account", "account"),
    ("simulations.cli.account", "register_calibrate", "calibrate"),
    ("simulations.cli.account_checkin", "register_calibrate", "calibrate"),
    ("simulations.cli.account_random", "register_calibrate", "calibrate"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="secagg-dp",
        description="Secure aggregation with discrete DP noise: simulate, verify, account, calibrate.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    groups: dict[str, Subparsers] = {}
    for name, help_text in (
        ("account", "certify (epsilon, delta) for a mechanism and a number of rounds"),
        ("calibrate", "find the smallest noise meeting a target (epsilon, delta)"),
    ):
        p = sub.add_parser(name, help=help_text, description=help_text)
        groups[name] = p.add_subparsers(dest="mechanism", metavar="MECHANISM", required=True)
    for module_name, func_name, group in _REGISTRY:
        module = importlib.import_module(module_name)
        getattr(module, func_name)(groups[group] if group else sub)
    return parser


# Environment variables that cap the BLAS thread pools numpy may load (OpenBLAS in the pip wheels, MKL, BLIS).
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def _one_blas_thread_for_queries(argv: Sequence[str]) -> None:
    """Before numpy is first imported, cap BLAS at one thread for ``account`` and ``calibrate`` unless the user
    set a cap. Their matrix products are small and many (the pair bound's lattice sums, the mixture's binomial
    sums): a second BLAS thread gains little on an idle machine, and on a busy one its spinning doubled the CPU
    time and tripled the wall time of the README's ``account checkin`` (benchmarks/bench_query.py). OpenBLAS
    splits a product by rows and columns, not along the summed index: the numbers are the same either way
    (the equality tests pass under both)."""
    if "numpy" in sys.modules or not argv or argv[0] not in ("account", "calibrate"):
        return
    if not any(name in os.environ for name in _BLAS_THREADS):
        for name in _BLAS_THREADS:
            os.environ[name] = "1"


def main(argv: Sequence[str] | None = None) -> int:
    _one_blas_thread_for_queries(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a one-line usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args.handler(args) or 0)
    except SecAggDPError as exc:
        print(f"secagg-dp: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
