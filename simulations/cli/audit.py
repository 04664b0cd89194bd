"""``secagg-dp audit``: an empirical lower bound on epsilon beside each certificate (see docs/audit.md).

secagg-dp audit mode=ideal population.checkin=1 rounds=1 --trials 20000   # analyst and server
secagg-dp audit --observer server --json                                   # results document on stdout
secagg-dp audit --one-run population.clients=1000 task.dim=1024            # Steinke, Nasr & Jagielski 2023
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from simulations.cli._args import Subparsers, int_in, real_in, scenario_args

__all__ = ["register", "handle", "SCHEMA"]

SCHEMA = "secagg-dp/audit-results/1"


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "audit",
        help="empirical LOWER bound on epsilon (canary attack on the simulated mechanism) beside the certificate",
        description=(
            "Run the scenario's round on two neighbouring datasets (client level, replace-one: a canary client "
            "holding +C e_1 or -C e_1 among clients with zero inputs) many times, attack each observer's view "
            "with its likelihood ratio, and report a Clopper-Pearson lower bound on epsilon at the certified "
            "delta next to the certificate. A lower bound proves no privacy; one above the certificate proves "
            "the run is not what was certified."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "overrides: dotted config keys as key=value, as for 'secagg-dp simulate'.\n"
            "examples:\n"
            "  secagg-dp audit --no-plots population.checkin=1 rounds=1 --trials 5000\n"
            "  secagg-dp audit --no-plots --fault halve-noise population.checkin=1 rounds=1 --trials 5000\n"
            "  secagg-dp audit --no-plots --one-run mode=ideal population.clients=400 task.dim=256 rounds=1"
        ),
    )
    scenario_args(p, "audit-out")
    p.add_argument("--seed", type=int_in(0, 2**63 - 1), help="seed of the audit's generator (default: fresh)")
    p.add_argument("--trials", type=int_in(6, 10**8), default=20_000, help="trials per side (default: %(default)s)")
    p.add_argument(
        "--observer",
        choices=("analyst", "server", "coalition", "all"),
        default="all",
        help="whose view to attack (coalition: the active server with secagg.corrupt_clients colluders; batched "
        "engine only)",
    )
    p.add_argument(
        "--confidence",
        type=real_in(0.0, 1.0, lo_open=True, hi_open=True),
        default=0.95,
        help="confidence of the lower bound (default: %(default)s)",
    )
    p.add_argument(
        "--engine",
        choices=("batched", "round"),
        default="batched",
        help="batched: trials vectorised over the round's parts (ideal round); round: the simulator's round "
        "function per trial (ideal or crypto mode; slow)",
    )
    p.add_argument(
        "--fault",
        choices=("halve-noise", "strip-noise"),
        help="audit a deliberately BROKEN mechanism (noise std halved after certification, or every add-then-"
        "remove group stripped by the server): the audit should report a violation",
    )
    p.add_argument("--one-run", action="store_true", help="one-run audit (Steinke, Nasr & Jagielski 2023)")
    p.add_argument("--canaries", type=int_in(1), help="one-run: canary clients (default: min(n/2, dim))")
    p.add_argument("--guesses", type=int_in(1), help="one-run: canaries guessed, the rest abstain (default: all)")
    p.add_argument("--json", action="store_true", help="print the results document as JSON")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plot")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None, help="show a progress bar")
    prog.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import numpy as np

    from secagg_dp.errors import ConfigError
    from simulations.audit import run_audit, run_one_run_audit
    from simulations.config import load_config
    from simulations.results import jsonable, write_atomic

    cfg = load_config(args.config, list(args.overrides) + list(args.set_))
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"Argument '--out' must be a folder (new or existing), not the existing file {str(out)!r}.")
    rng = np.random.default_rng(args.seed) if args.seed is not None else None
    if args.one_run:
        audit = run_one_run_audit(
            cfg, canaries=args.canaries, guesses=args.guesses, rng=rng, confidence=args.confidence, fault=args.fault
        )
    else:
        progress = args.progress
        if progress is None:
            progress = args.trials * cfg.rounds >= 200_000 and sys.stderr.isatty()
        audit = run_audit(
            cfg,
            trials=args.trials,
            observer=args.observer,
            rng=rng,
            confidence=args.confidence,
            fault=args.fault,
            engine=args.engine,
            progress=progress,
        )
    doc: dict[str, Any] = {"schema": SCHEMA, "config": cfg.as_dict(), "seed": args.seed, "audit": audit}
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "results.json", doc)
    if not args.no_plots:
        plot_audit(audit, out / "audit.png")
    if args.json:
        print(json.dumps(jsonable(doc), indent=2, allow_nan=False))
    else:
        print("\n".join(summary_lines(audit)))
        print(f"\nresults: {out / 'results.json'}" + ("" if args.no_plots else f", plot: {out / 'audit.png'}"))
    return 0


def summary_lines(audit: dict[str, Any]) -> list[str]:
    """One line per observer: the lower bound beside the certificate, and a verdict."""
    lines = []
    for o in audit["observers"]:
        r = audit[o]
        lo, cert = r["epsilon_lower"], r["epsilon_certified"]
        verdict = "VIOLATION: above the certificate" if r["violation"] else "consistent with the certificate"
        lines.append(
            f"{o:<9} empirical ε ≥ {lo:.3f} ({r['confidence']:.0%} confidence)   certified ε ≤ {cert:.3f}   "
            f"δ = {r['delta']:g}   {r['trials']} trials/side   {verdict}"
        )
    if audit.get("fault"):
        lines.append(f"(deliberately broken mechanism: {audit['fault']})")
    return lines


def plot_audit(audit: dict[str, Any], path: Path) -> None:
    """Bar plot: each observer's empirical lower bound beside its certificate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(audit["observers"])
    lower = [audit[o]["epsilon_lower"] for o in names]
    cert = [audit[o]["epsilon_certified"] for o in names]
    xs = range(len(names))
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar([x - 0.2 for x in xs], cert, width=0.4, label="certified ε (upper bound)", color="C0")
    ax.bar([x + 0.2 for x in xs], [min(v, 1e3) for v in lower], width=0.4, label="audit ε (lower bound)", color="C1")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel(f"ε at δ = {audit[names[0]]['delta']:g}")
    title = f"audit: T = {audit['rounds']}, {audit[names[0]]['trials']} trials/side"
    ax.set_title(title + (f", fault {audit['fault']}" if audit.get("fault") else ""), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
