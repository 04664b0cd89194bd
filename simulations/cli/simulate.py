"""``secagg-dp simulate``: run a scenario (or study) and print a summary table.

    secagg-dp simulate                                   # small default scenario, results in ./simulate-out
    secagg-dp simulate --config dropouts --out runs/d    # a bundled scenario (simulations/configs/*.toml)
    secagg-dp simulate population.dropout=0.3 mode=crypto --set rounds=10
    secagg-dp simulate --executor dask [--scheduler tcp://host:8786]
    secagg-dp simulate --json                            # print the results document instead of the table
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["register", "handle"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate rounds of secure aggregation with DP noise; write results.json and plots",
        description=(
            "Simulate rounds of the protocol (check-in, dropouts, encode, noise, mask, unmask, decode, "
            "account) for a scenario and print a summary table. Without arguments runs a small default "
            "scenario (mean estimation, 60 clients checking in with p = 0.5, 5 rounds through the full secure-aggregation protocol)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "overrides: dotted config keys as key=value (TOML values), e.g.\n"
            "  population.clients=200 population.checkin=0.3 population.dropout=0.1\n"
            "  mode=crypto secagg.bits=16 privacy.mechanism=skellam privacy.noise_multiplier=2\n"
            "  task.name=logreg task.local_steps=4 rounds=20 seed=7\n"
            "bundled configs: default, dropouts, sampling, local_steps, bits (simulations/configs/)."
        ),
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides (dotted keys)")
    p.add_argument("--config", "-c", metavar="FILE", help="TOML scenario: a path or a bundled name")
    p.add_argument("--out", "-o", metavar="DIR", default="simulate-out", help="output folder (default: %(default)s)")
    p.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE", help="one override (repeatable)")
    p.add_argument("--executor", choices=("inprocess", "dask"), help="where client work runs (overrides the config)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler address (default: start a LocalCluster)")
    p.add_argument("--seed", type=int, help="root seed (overrides the config)")
    p.add_argument("--json", action="store_true", help="print the results document as JSON")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show a progress bar")
    prog.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from simulations.config import load_config
    from simulations.study import format_table, observer_lines, run, summary_rows

    overrides = list(args.overrides) + list(args.set_)
    if args.executor:
        overrides.append(f"executor={args.executor!r}".replace("'", '"'))
    if args.scheduler:
        overrides.append(f'scheduler="{args.scheduler}"')
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    cfg = load_config(args.config or "default", overrides)  # one ConfigError before any work
    progress = args.progress
    if progress is None:  # long runs only: a rough count of client-rounds
        n_variants = 1
        for values in cfg.study.grid.values():
            n_variants *= len(values)
        work = n_variants * cfg.rounds * cfg.population.expected_checkins * (20 if cfg.mode == "crypto" else 1)
        progress = work > 2000 and sys.stderr.isatty()
    try:
        doc = run(cfg, args.out, progress=progress, plots=not args.no_plots)
    except KeyboardInterrupt:
        print(f"secagg-dp: interrupted; partial results in {args.out}/results.json", file=sys.stderr)
        return 130
    if args.json:
        from simulations.results import jsonable

        print(json.dumps(jsonable(doc), indent=2))
    else:
        print(format_table(summary_rows(doc)))
        print("\n" + "\n".join(observer_lines(doc)))
        print(f"\nresults: {args.out}/results.json")
    return 0
