"""``secagg-dp ledger PATH``: a privacy ledger summarised (grouped events, outcomes, the run's certified ε per
observer, the ledger's own composition, the budget and what remains); ``--events`` lists every event."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from simulations.cli._args import DELTA, Subparsers

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


#: Why the ledger's own composition can exceed the run's certificate (printed under it, and in --json).
RDP_NOTE = (
    "the ledger composes each event's RDP curve; the run's certificate uses the tightest certified method "
    "(window or PLD, when tighter), so this can be larger; both are upper bounds, and the budget is checked "
    "against this one"
)
#: Keys of a nested event description that lead towards its base mechanism.
_INNER = ("provider", "mechanism", "event", "base")
#: Fields of a mechanism shown as its noise, in this order.
_NOISE = ("sigma", "noise_multiplier", "mu", "target_variance", "variance", "epsilon", "tolerance")
_SENS = (("l2_sensitivity", "Delta2"), ("sensitivity", "Delta"), ("l1_sensitivity", "Delta1"))


def _chain(desc: dict[str, Any]) -> list[dict[str, Any]]:
    """``desc`` and the descriptions nested in it towards the base mechanism, outermost first."""
    out = [desc]
    while True:
        inner = next((out[-1][k] for k in _INNER if isinstance(out[-1].get(k), dict)), None)
        if inner is None:
            return out
        out.append(inner)


def _readable(desc: dict[str, Any], observer: str | None) -> str:
    """One readable line: the event type, then mechanism, n, gamma (or the sampling rate / size), noise, observer."""
    chain = _chain(desc)
    mech = chain[-1]
    parts = [f"mechanism {mech.get('type', '?')}"]
    n = next((d[k] for d in chain for k in ("clients", "n") if isinstance(d.get(k), int)), None)
    if n is not None:
        parts.append(f"n={n}")
    gamma = next((d["gamma"] for d in chain if isinstance(d.get("gamma"), float)), None)
    size = next((d["sample_size"] for d in chain if isinstance(d.get("sample_size"), int)), None)
    rate = next((d["rate"] for d in chain if isinstance(d.get("rate"), float)), None)
    if gamma is not None:
        parts.append(f"gamma={gamma:.6g}")
    elif size is not None:
        parts.append(f"sample size m={size}")
    elif rate is not None:
        parts.append(f"rate={rate:.6g}")
    noise = [f"{k}={_value(mech[k])}" for k in _NOISE if isinstance(mech.get(k), (int, float))]
    noise += [f"{label}={_value(mech[k])}" for k, label in _SENS if isinstance(mech.get(k), (int, float))]
    if noise:
        parts.append("noise " + ", ".join(noise))
    parts.append(f"observer {observer}" if observer else "observer not recorded")
    head = desc.get("type", "?")
    return f"{head}: " + ", ".join(parts) if len(chain) > 1 else ", ".join([f"{head}", *parts[1:]])


def _spans(seqs: list[int]) -> str:
    """1-20, 22, 25-30."""
    out: list[str] = []
    start = prev = seqs[0]
    for s in [*seqs[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(out)


def _groups(
    entries: list[tuple[dict[str, Any], int]], outcomes: list[tuple[str, str] | None], observer: str | None
) -> list[dict[str, Any]]:
    """Identical events (same description) collapsed, in order of first appearance."""
    import json

    groups: dict[str, dict[str, Any]] = {}
    for seq, ((desc, count), outcome) in enumerate(zip(entries, outcomes, strict=True), 1):
        key = json.dumps(desc, sort_keys=True, default=repr)
        g = groups.setdefault(
            key,
            {"count": 0, "events": 0, "seqs": [], "line": _readable(desc, observer), "event": desc, "outcomes": {}},
        )
        g["count"] += count
        g["events"] += 1
        g["seqs"].append(seq)
        name = "not recorded" if outcome is None else outcome[0]
        g["outcomes"][name] = g["outcomes"].get(name, 0) + 1
    out = []
    for g in groups.values():
        g["seq"] = _spans(g.pop("seqs"))
        out.append(g)
    return out


def _outcome_names() -> tuple[str, ...]:
    from secagg_dp.accounting.core.ledger import OUTCOMES

    return OUTCOMES


def _outcome_summary(outcomes: list[tuple[str, str] | None]) -> dict[str, Any]:
    """Counts per outcome, and the reasons of the aborted and failed events (reason -> how many)."""
    from secagg_dp.accounting.core.ledger import OUTCOMES

    counts = dict.fromkeys(OUTCOMES, 0)
    counts["not recorded"] = 0
    reasons: dict[str, dict[str, int]] = {"aborted": {}, "failed": {}}
    for o in outcomes:
        name = "not recorded" if o is None else o[0]
        counts[name] += 1
        if o is not None and o[0] in reasons:
            reasons[o[0]][o[1]] = reasons[o[0]].get(o[1], 0) + 1
    return {"counts": counts, "reasons": reasons}


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
        run = led.run
        if args.delta is not None:
            delta, source = args.delta, "--delta"
        elif run is not None:
            delta, source = run["delta"], "stored by the run"
        elif led.delta is not None:
            delta, source = led.delta, "the budget's"
        else:
            raise ParameterError(
                f"Argument '--delta' is required: ledger {path!r} stores no delta (no run delta, no budget)."
            )
        cert = led.certificate(delta)
        budget, budget_delta = led.epsilon_budget, led.delta
        at_budget = cert.epsilon if budget_delta in (None, delta) else led.certificate(budget_delta).epsilon
        remaining = None if budget is None else budget - at_budget
        entries, outcomes = led.entries, led.outcomes
        observer = None if run is None else run["observer"]
        certified = led.certified
        for c in certified.values():
            c["covers_all_events"] = c.get("events") == len(entries)
        doc: dict[str, Any] = {
            "path": path,
            "format": led.format,
            "neighbouring": led.neighbouring,
            "accountant": cert.method,
            "run": run,
            "delta": delta,
            "delta_source": source,
            "outcomes": _outcome_summary(outcomes),
            "certified": certified,
            "ledger_composition": {
                "epsilon": cert.epsilon,
                "order": cert.order,
                "delta": delta,
                "method": cert.method,
                "note": RDP_NOTE,
            },
            "epsilon": cert.epsilon,
            "order": cert.order,
            "certificate": cert.as_dict(),
            "epsilon_budget": budget,
            "budget_delta": budget_delta,
            "remaining_epsilon": remaining,
        }
        if args.events:
            doc["events"] = [
                {
                    "seq": i,
                    "count": c,
                    "event": d,
                    "outcome": None if o is None else o[0],
                    "reason": None if o is None else o[1],
                }
                for i, ((d, c), o) in enumerate(zip(entries, outcomes, strict=True), 1)
            ]
        else:
            doc["groups"] = _groups(entries, outcomes, observer)
        if args.json:
            print(dumps(doc, indent=2))
            return 0
        _print_text(doc, len(entries), args.events)
    return 0


def _print_text(doc: dict[str, Any], n_events: int, events: bool) -> None:
    """The human-readable form of ``doc`` (summary, or every event with ``events``)."""
    header = f"ledger {doc['path']}: format {doc['format']}, {doc['neighbouring']}, {n_events} event(s)"
    if events:
        print(header)
        print(f"  {'seq':>5}  {'count':>7}  event")
        for e in doc["events"]:
            why = "" if e["outcome"] is None else f"  [{e['outcome']}{': ' + e['reason'] if e['reason'] else ''}]"
            print(f"  {e['seq']:>5}  {e['count']:>7}  {_event_text(e['event'])}{why}")
    else:
        print(f"{header} in {len(doc['groups'])} group(s) of identical events")
        print(f"  {'count':>7}  event")
        for g in doc["groups"]:
            names = [*_outcome_names(), "not recorded"]
            out = ", ".join(f"{g['outcomes'][k]} {k}" for k in names if k in g["outcomes"])
            print(f"  {g['count']:>7}  {g['line']}  [events {g['seq']}: {out}]")
        counts, reasons = doc["outcomes"]["counts"], doc["outcomes"]["reasons"]
        shown = ", ".join(f"{v} {k}" for k, v in counts.items() if v or k != "not recorded")
        print(f"outcomes: {shown} (every event is charged, whatever its outcome)")
        for kind in ("aborted", "failed"):
            for why, k in reasons[kind].items():
                print(f"  {kind} x{k}: {why}")
    delta, certified = doc["delta"], doc["certified"]
    if not events:  # --events keeps the event list's layout: events, spent, budget
        print(f"delta: {delta:g} ({doc['delta_source']})")
    if certified and not events:
        print("certified by the run (its own certificate per observer, an upper bound at the delta shown):")
        for obs, c in certified.items():
            eps = "inf" if c.get("epsilon") is None else f"{c['epsilon']:.6g}"
            cover = "" if c["covers_all_events"] else f"; covers {c.get('events')} of {n_events} events"
            print(f"  {obs:<10} epsilon = {eps} at delta = {c['delta']:g} ({c.get('method', '?')}{cover})")
    elif not events:
        print("certified by the run: not recorded in this ledger (only the ledger's composition below)")
    comp = doc["ledger_composition"]
    order = "" if comp["order"] is None or not math.isfinite(comp["order"]) else f", order {comp['order']:g}"
    label = "spent" if events else f"ledger {comp['method'].upper()} composition"
    print(f"{label}: epsilon = {comp['epsilon']:.6g} at delta = {delta:g} ({comp['method']}{order})")
    if not events:
        print(f"  ({RDP_NOTE})")
    budget, remaining = doc["epsilon_budget"], doc["remaining_epsilon"]
    if budget is None:
        print("budget: none")
    else:
        print(f"budget: epsilon = {budget:g} at delta = {doc['budget_delta']:g}, remaining {remaining:.6g}")


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


def register(subparsers: Subparsers) -> None:
    """Add the ``ledger`` subcommand."""
    help_text = (
        "summarise a privacy ledger: grouped events and their outcomes, the epsilon the run certified per "
        "observer, the ledger's own composition, the budget and what remains"
    )
    p = subparsers.add_parser("ledger", help=help_text, description=help_text)
    p.add_argument("path", metavar="PATH", help="the ledger file (e.g. simulate-out/ledger.sqlite)")
    p.add_argument(
        "--delta",
        type=DELTA,
        default=None,
        help="delta of the ledger's composed epsilon (default: the run's stored delta, else the budget's)",
    )
    p.add_argument(
        "--accountant",
        choices=ACCOUNTANTS,
        default="rdp",
        help="accountant re-composing the events: rdp (default, at the file's orders) or pld (Gaussian events only)",
    )
    p.add_argument(
        "--events", action="store_true", help="list every event (with its outcome) instead of the grouped summary"
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON (summary, or with --events)")
    p.set_defaults(handler=_handler)
