"""``secagg-dp ledger PATH``: a privacy ledger's events, the ε spent at δ, the budget and what remains."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from simulations.cli._args import DELTA

__all__ = ["register"]

ACCOUNTANTS = ("rdp", "pld")


def _value(v: Any) -> str:
    if isinstance(v, dict) and "type" in v:
        return _event_text(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _event_text(desc: dict[str, Any]) -> str:
    """``Type(field=value, ...)`` on one line, nested events the same way."""
    fields = ", ".join(f"{k}={_value(v)}" for k, v in desc.items() if k != "type")
    return f"{desc.get('type', '?')}({fields})"


def _handler(args: argparse.Namespace) -> int:
    from secagg_dp.accounting.core.accountant import PrivacyAccountant
    from secagg_dp.accounting.core.ledger import PrivacyLedger
    from secagg_dp.errors import LedgerError, ParameterError
    from simulations.cli._output import dumps

    path = args.path
    if not os.path.lexists(path):
        raise LedgerError(f"Ledger file {path!r} does not exist.")
    accountant: PrivacyAccountant | None = None
    if args.accountant == "pld":
        import sqlite3

        from secagg_dp.accounting.core.pld_accountant import PLDAccountant

        neighbouring = _stored_neighbouring(path, sqlite3)
        accountant = PLDAccountant(neighbouring)
    with PrivacyLedger(path=path, accountant=accountant, read_only=True) as led:
        delta = args.delta if args.delta is not None else led.delta
        if delta is None:
            raise ParameterError(
                f"Argument '--delta' is required: ledger {path!r} has no budget, so no delta of its own."
            )
        cert = led.certificate(delta)
        budget, budget_delta = led.epsilon_budget, led.delta
        at_budget = cert.epsilon if budget_delta in (None, delta) else led.certificate(budget_delta).epsilon
        remaining = None if budget is None else budget - at_budget
        entries = led.entries
        events = [{"seq": i, "count": c, "event": d} for i, (d, c) in enumerate(entries, 1)]
        if args.json:
            doc = {
                "path": path,
                "format": led.format,
                "neighbouring": led.neighbouring,
                "accountant": cert.method,
                "events": events,
                "delta": delta,
                "epsilon": cert.epsilon,
                "order": cert.order,
                "certificate": cert.as_dict(),
                "epsilon_budget": budget,
                "budget_delta": budget_delta,
                "remaining_epsilon": remaining,
            }
            print(dumps(doc, indent=2))
            return 0
        print(f"ledger {path}: format {led.format}, {led.neighbouring}, {len(events)} event(s)")
        print(f"  {'seq':>5}  {'count':>7}  event")
        for i, (desc, count) in enumerate(entries, 1):
            print(f"  {i:>5}  {count:>7}  {_event_text(desc)}")
        order = "" if cert.order is None or not math.isfinite(cert.order) else f", order {cert.order:g}"
        print(f"spent: epsilon = {cert.epsilon:.6g} at delta = {delta:g} ({cert.method}{order})")
        if budget is None:
            print("budget: none")
        else:
            print(f"budget: epsilon = {budget:g} at delta = {budget_delta:g}, remaining {remaining:.6g}")
    return 0


def _stored_neighbouring(path: str, sqlite3: Any) -> str:
    """The neighbouring relation a ledger file was created with (for building its PLD accountant)."""
    from secagg_dp.accounting.core.events import check_neighbouring
    from secagg_dp.errors import LedgerError, ParameterError

    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'neighbouring'").fetchone()
        finally:
            conn.close()
        return str(check_neighbouring(row[0] if row else None))
    except (sqlite3.Error, ParameterError) as exc:
        raise LedgerError(
            f"Ledger file {path!r} has no readable neighbouring relation: not a ledger ({exc})."
        ) from None


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]  # argparse's is generic
    """Add the ``ledger`` subcommand."""
    help_text = "show a privacy ledger: its events, the epsilon spent at delta, the budget and what remains"
    p = subparsers.add_parser("ledger", help=help_text, description=help_text)
    p.add_argument("path", metavar="PATH", help="the ledger file (e.g. simulate-out/ledger.sqlite)")
    p.add_argument("--delta", type=DELTA, default=None, help="delta of the spent epsilon (default: the budget's)")
    p.add_argument(
        "--accountant",
        choices=ACCOUNTANTS,
        default="rdp",
        help="accountant re-composing the events: rdp (default, at the file's orders) or pld (Gaussian events only)",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(handler=_handler)
