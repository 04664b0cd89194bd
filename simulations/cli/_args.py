"""Argument types and the parser class shared by every ``secagg-dp`` command.

Each type validates at parse time, so a bad value becomes ``secagg-dp CMD: error: argument --flag: must be
..., not X`` (exit 2) before any work starts. :class:`OneLineParser` prints that as one line on stderr
(the usage is one ``--help`` away) instead of argparse's usage block.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn, TypeAlias

__all__ = [
    "OneLineParser",
    "Subparsers",
    "int_in",
    "real_in",
    "DELTA",
    "PROBABILITY",
    "POSITIVE",
    "NON_NEGATIVE",
    "MAX_CHECKIN_ORDER",
    "MAX_SHUFFLE_ORDER",
    "participation_flags",
    "grid_flags",
    "max_order_flag",
]

#: Caps on unbounded work: the check-in mixture at 1024 orders already takes tens of seconds.
MAX_CHECKIN_ORDER = 1024
MAX_SHUFFLE_ORDER = 4096


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


#: What a module's ``register(subparsers)`` receives: a subcommand group of the :class:`OneLineParser` CLI (its
#: ``add_parser`` makes OneLineParsers). A string: argparse's class is generic for type checkers only.
Subparsers: TypeAlias = "argparse._SubParsersAction[OneLineParser]"


def int_in(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi] (``1e6`` is accepted when it is an integer)."""

    def parse(text: str) -> int:
        from secagg_dp._validate import range_text  # lazily: it imports numpy, which --help must not load

        try:
            value = int(text)
        except ValueError:
            try:
                f = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"must be an integer{range_text(lo, hi)}, not {text!r}") from None
            if not (math.isfinite(f) and f.is_integer()):
                raise argparse.ArgumentTypeError(f"must be an integer{range_text(lo, hi)}, not {text!r}") from None
            value = int(f)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be an integer{range_text(lo, hi)}, not {value}")
        return value

    parse.__name__ = "integer"
    return parse


def real_in(
    lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False
) -> Callable[[str], float]:
    """An argparse type: a finite real number in the given (open or closed) interval."""
    left, right = "(" if lo_open or lo is None else "[", ")" if hi_open or hi is None else "]"
    span = f" in {left}{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}{right}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a real number{span}, not {text!r}") from None
        bad = not math.isfinite(value) or (
            (lo is not None and (value < lo or (lo_open and value == lo)))
            or (hi is not None and (value > hi or (hi_open and value == hi)))
        )
        if bad:
            raise argparse.ArgumentTypeError(f"must be a finite real number{span}, not {text}")
        return value

    parse.__name__ = "real"
    return parse


#: δ of a certificate: 0 gives no finite ε for the Gaussian family and δ ≥ 1 says nothing.
DELTA = real_in(0.0, 1.0, lo_open=True, hi_open=True)
PROBABILITY = real_in(0.0, 1.0)
POSITIVE = real_in(0.0, None, lo_open=True)
NON_NEGATIVE = real_in(0.0, None)


def stderr_note(text: str) -> None:
    """A progress or warning line on stderr (never mixed into JSON on stdout)."""
    print(f"secagg-dp: {text}", file=sys.stderr, flush=True)


def participation_flags(p: argparse.ArgumentParser, gamma_help: str) -> None:
    """``--n``/``--clients`` and who takes part: ``--gamma`` (help ``gamma_help``), or ``--p`` with ``--dropout``
    over ``--dropout-stages`` (gamma = p (1 - p')^N; the commands' :func:`_gamma_of` checks the pairing)."""
    from secagg_dp.stages import PROTOCOL_DROPOUT_STAGES

    p.add_argument(
        "--n", "--clients", dest="n", type=int_in(1), required=True, help="number of clients N (alias --clients)"
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--gamma", type=PROBABILITY, help=gamma_help)
    g.add_argument("--p", type=PROBABILITY, help="check-in probability p (use with --dropout)")
    p.add_argument(
        "--dropout",
        type=PROBABILITY,
        default=None,
        help="dropout probability p' per stage; gamma = p (1 - p')^N with N = --dropout-stages",
    )
    p.add_argument(
        "--dropout-stages",
        type=int_in(1),
        default=PROTOCOL_DROPOUT_STAGES,
        metavar="N",
        help="dropout chances before the masked input is received: 3 (default) = our protocol "
        "(advertise_keys, share_keys, masked_input), gamma = p (1 - p')^3; 1 = the single-dropout "
        "model gamma = p (1 - p') of the self check-in draft",
    )


def max_order_flag(p: argparse.ArgumentParser, cap: int, default: int, note: str = "") -> None:
    """``--max-order``: the largest integer RDP order, in [2, ``cap``]; ``note`` says which orders are used."""
    p.add_argument(
        "--max-order",
        type=int_in(2, cap),
        default=default,
        help=f"largest integer RDP order, at most {cap} (default {default}){note}",
    )


def grid_flags(p: argparse.ArgumentParser) -> None:
    """``--scale``, ``--dim`` of the discrete mechanisms and ``--max-order`` of the check-in mixture."""
    p.add_argument(
        "--scale",
        type=POSITIVE,
        default=256.0,
        help="ddg/skellam: grid points per unit of C (sensitivities 2*scale, noise sigma*scale)",
    )
    p.add_argument("--dim", type=int_in(1), default=1, help="ddg/skellam: vector dimension d")
    max_order_flag(p, MAX_CHECKIN_ORDER, MAX_CHECKIN_ORDER, "; orders are every integer up to 256, then every 16th")


def scenario_args(p: argparse.ArgumentParser, out_default: str) -> None:
    """The scenario every simulator command reads, spelled once (``simulate``, ``audit``): positional dotted
    ``KEY=VALUE`` overrides, ``--config`` (a TOML path or a bundled name), repeatable ``--set`` and ``--out``."""
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides (dotted keys)")
    p.add_argument("--config", "-c", metavar="FILE", help="TOML scenario: a path or a bundled name")
    p.add_argument("--out", "-o", metavar="DIR", default=out_default, help="output folder (default: %(default)s)")
    p.add_argument(
        "--set", dest="set_", action="append", default=[], metavar="KEY=VALUE", help="one override (repeatable)"
    )
