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
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secagg_dp.errors import ConfigError
from simulations.cli._args import Subparsers, int_in, scenario_args

if TYPE_CHECKING:
    from simulations.config import SimConfig

__all__ = ["register", "handle"]


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate rounds of secure aggregation with DP noise; write results.json and plots",
        description=(
            "Simulate rounds of the protocol (check-in, dropouts, encode, noise, mask, unmask, decode, "
            "account) for a scenario and print a summary table. Without arguments runs a small default "
            "scenario (mean estimation, 60 clients checking in with p = 0.5, 5 rounds through the full "
            "secure-aggregation protocol)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "overrides: dotted config keys as key=value (TOML values); a key a --config file leaves out takes\n"
            "the value of the bundled default scenario. Setting secagg.threshold clears threshold_fraction\n"
            "(and back); setting task.name drops the other task's keys.\n"
            "examples:\n"
            "  secagg-dp simulate --no-plots rounds=1\n"
            "  secagg-dp simulate --no-plots mode=ideal population.clients=200 population.checkin=0.3 "
            "population.dropout=0.1\n"
            "  secagg-dp simulate --no-plots mode=ideal secagg.bits=24 privacy.mechanism=skellam "
            "privacy.noise_multiplier=2 rounds=2\n"
            "  secagg-dp simulate --no-plots mode=ideal task.name=logreg task.local_steps=4 rounds=2 seed=7\n"
            "  secagg-dp simulate --no-plots mode=ideal secagg.threshold=5 privacy.epsilon_budget=4\n"
            "  secagg-dp simulate --no-plots --baseline --target-epsilon 4 mode=ideal rounds=3\n"
            "bundled configs: default, dropouts, sampling, local_steps, bits (simulations/configs/)."
        ),
    )
    scenario_args(p, "simulate-out")
    p.add_argument("--executor", choices=("inprocess", "dask"), help="where client work runs (overrides the config)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler address (default: start a LocalCluster)")
    p.add_argument("--seed", type=int_in(0, 2**63 - 1), help="root seed (overrides the config)")
    p.add_argument(
        "--baseline",
        action="store_true",
        help="also run the same seeded scenario without noise (privacy.mechanism = none) and record it beside "
        "the private run (results.json 'baseline', both curves in the plot); config key: baseline = true",
    )
    p.add_argument(
        "--target-epsilon",
        type=float,
        metavar="E",
        help="calibrate privacy.noise_multiplier before round 1: the smallest z whose certificate for "
        "privacy.observer (default analyst) after the planned rounds is <= E at privacy.delta; it replaces a "
        "configured noise_multiplier (config key: privacy.target_epsilon)",
    )
    p.add_argument("--json", action="store_true", help="print the results document as JSON")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument(
        "--progress", dest="progress", action="store_true", default=None, help="always show a progress bar"
    )
    prog.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")
    p.set_defaults(handler=handle)


#: A per-round wrap-around probability bound above this is printed with the summary.
_WRAP_NOTE = 1e-6


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
    if args.baseline:
        overrides.append("baseline=true")
    if args.target_epsilon is not None:
        if not math.isfinite(args.target_epsilon) or args.target_epsilon <= 0:
            raise ConfigError(f"Argument '--target-epsilon' must be a finite number > 0, not {args.target_epsilon!r}.")
        overrides.append(f"privacy.target_epsilon={args.target_epsilon!r}")
    cfg = load_config(args.config, overrides)  # one ConfigError before any work
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"Argument '--out' must be a folder (new or existing), not the existing file {str(out)!r}.")
    progress = args.progress
    if progress is None:  # long runs only: a rough count of client-rounds
        n_variants = 1
        for values in cfg.study.grid.values():
            n_variants *= len(values)
        work = n_variants * cfg.rounds * cfg.population.expected_checkins * (20 if cfg.mode == "crypto" else 1)
        progress = work > 2000 and sys.stderr.isatty()
    _check_extras(cfg, plots=not args.no_plots, progress=progress)
    if cfg.executor == "dask" and cfg.scheduler:
        _check_scheduler(cfg.scheduler)
    _check_out(out)
    try:
        doc = run(cfg, out, progress=progress, plots=not args.no_plots)
    except KeyboardInterrupt:
        print(f"secagg-dp: interrupted; partial results in {out / 'results.json'}", file=sys.stderr)
        return 130
    _warn_aborts(doc)
    if args.json:
        from simulations.results import jsonable

        print(json.dumps(jsonable(doc), indent=2, allow_nan=False))
    else:
        print(format_table(summary_rows(doc)))
        print("\n" + "\n".join(observer_lines(doc)))
        print()
        print(summary_text(doc, out))
    return 0


def _warn_aborts(doc: dict[str, Any]) -> None:
    """One warning line on stderr per run with aborted rounds: how many, why, and what they were charged."""
    from simulations.study import collapse_lines

    runs = doc["runs"] if "runs" in doc else [{"label": doc["config"]["name"], "results": doc}]
    lines = []
    for r in runs:
        s = r["results"].get("summary", {})
        if not s.get("aborted_rounds"):
            continue
        why = "; ".join(f"{k} ({v} round{'' if v == 1 else 's'})" for k, v in s.get("abort_reasons", {}).items())
        lines.append(
            f"secagg-dp: warning: {r['label']}: {s['aborted_rounds']} of {len(r['results']['rounds'])} rounds aborted "
            f"({why}); nothing was released for them, yet each is charged as a full round: epsilon = "
            f"{s['epsilon']:.4g} at delta = {s['delta']:g}, of which the completed rounds alone account for "
            f"{s['epsilon_completed_rounds']:.4g}. To fix, lower population.dropout or secagg.threshold, or raise "
            "population.clients or population.checkin."
        )
    for line in collapse_lines(lines):
        print(line, file=sys.stderr)


def _check_out(out: Path) -> None:
    """Prove the output folder can be created and written before any round runs (one ConfigError, not a
    traceback); folders created for the probe are removed again."""
    import tempfile

    created = [p for p in (out, *out.parents) if not p.exists()]  # removed again: the run creates them
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
        for p in created:  # innermost first; rmdir removes empty folders only
            p.rmdir()
    except OSError as exc:
        raise ConfigError(
            f"Argument '--out' must be a folder that can be created and written, not {str(out)!r} "
            f"({exc.strerror or exc})."
        ) from None


def summary_text(doc: dict[str, Any], out: Path) -> str:
    """The lines under the table: what ε certifies, stops, wrap-around risk, and where every file is (a line
    repeated for the seeds of one variant is printed once, with its count)."""
    from simulations.study import collapse_lines

    runs = doc["runs"] if "runs" in doc else [{"label": doc["config"]["name"], "out": "", "results": doc}]
    lines = []
    for r in runs:
        res = r["results"]
        priv = res["privacy"]
        tag = f"[{r['label']}] " if len(runs) > 1 else ""
        observer = priv.get("observer", "analyst")
        unit = "sample-level" if priv.get("unit") == "sample" else "client-level"
        eps = res["summary"].get("epsilon")
        eps_text = "inf" if eps is None or eps == math.inf else f"{eps:.6g}"
        if priv.get("mechanism") == "none":  # the non-private baseline run on its own
            lines.append(
                f"{tag}no noise (privacy.mechanism = none): ε = inf for every observer, no privacy; the codec is "
                f"the one of noise multiplier {res['config']['privacy']['noise_multiplier']:g}; nothing was charged"
            )
        else:
            lines.append(
                f"{tag}certified ε ({observer} view, {unit}, {priv.get('neighbouring')}) at δ = "
                f"{priv.get('delta'):g}: {eps_text}  (method: {priv.get('method')}, {priv.get('accountant')})"
            )
        cal = priv.get("calibration")
        if cal:  # privacy.target_epsilon: the noise the simulator chose
            lines.append(
                f"{tag}noise calibrated to target ε = {cal['target_epsilon']:g} ({cal['observer']} view, "
                f"{cal['rounds']} rounds, δ = {cal['delta']:g}): noise_multiplier = {cal['noise_multiplier']:.6g} "
                f"(certified ε = {cal['epsilon']:.6g}; the configured {cal['configured_noise_multiplier']:g} is "
                "replaced)"
            )
        base = res.get("baseline")
        if base:
            mine, theirs = res["summary"].get("final_metrics") or {}, base["summary"].get("final_metrics") or {}
            pairs = ", ".join(
                f"{k} {mine[k]:.4g} private vs {theirs[k]:.4g} without noise" for k in mine if k in theirs
            )
            lines.append(
                f"{tag}baseline (same scenario, no noise, ε = inf: no privacy): {pairs or 'no metrics'}; "
                f"{out / r['out'] / base['out'] / 'results.json' if r['out'] else out / base['out'] / 'results.json'}"
            )
        compared = priv.get("methods_compared")
        if compared:  # privacy.method = "auto": say what the choice was made from
            options = ", ".join(f"{m} {e:.6g}" for m, e in compared.items())
            planned = res.get("config", {}).get("rounds")
            lines.append(f"{tag}method {priv.get('method')}: the tightest certified for {planned} rounds ({options})")
        done = res["summary"].get("rounds_completed", 0)
        if res.get("status") == "budget_exhausted":
            lines.append(
                f"{tag}stopped: budget exhausted after {done} rounds "
                f"(epsilon_budget = {priv.get('ledger', {}).get('epsilon_budget')})"
            )
        comm = res["summary"].get("communication")
        if comm:
            lines.append(f"{tag}{communication_line(comm)}")
        wrap = res.get("derived", {}).get("wrap_probability_bound")
        if wrap is not None and wrap > _WRAP_NOTE:
            lines.append(
                f"{tag}wrap-around: P(some coordinate of a round's sum wraps mod q) <= {wrap:.3g} per "
                "round; raise secagg.bits or privacy.k_stddevs to lower it"
            )
    lines = collapse_lines(lines)
    lines.append(f"results: {out / 'results.json'}")
    plots = list(doc.get("plots", [])) + [
        f"{r['out']}/{p}" for r in runs if r["out"] for p in r["results"].get("plots", [])
    ]
    if plots:
        lines.append("plots: " + ", ".join(str(out / p) for p in plots))
    ledgers = [out / r["out"] / "ledger.sqlite" if r["out"] else out / "ledger.sqlite" for r in runs]
    if any(p.exists() for p in ledgers):  # a run without noise (mechanism none) writes no ledger
        lines.append("ledger: " + ", ".join(str(p) for p in ledgers if p.exists()))
    return "\n".join(lines)


def communication_line(comm: dict[str, Any]) -> str:
    """The ``summary.communication`` of a crypto-mode run in one line (kB = 10^3 bytes)."""
    raw = comm["raw_bytes"]
    ratio = f" = {comm['upload_bytes_mean'] / raw:.3g}x the {raw / 1e3:.4g} kB unmasked vector" if raw else ""
    return (
        f"communication per client per round: upload {comm['upload_bytes_mean'] / 1e3:.4g} kB mean{ratio}, "
        f"{comm['upload_bytes_max'] / 1e3:.4g} kB max; download {comm['download_bytes_mean'] / 1e3:.4g} kB mean, "
        f"{comm['download_bytes_max'] / 1e3:.4g} kB max"
    )


def _check_extras(cfg: SimConfig, *, plots: bool, progress: bool) -> None:
    """Refuse before any work when an optional module the run will import is missing."""
    import importlib.util

    need = []
    if plots:
        need.append(("matplotlib", "plots (or pass --no-plots)"))
    if progress:
        need.append(("tqdm", "the progress bar (or pass --no-progress)"))
    if cfg.task.name == "logreg" or any("logreg" in map(str, v) for v in cfg.study.grid.values()):
        need.append(("sklearn", "task 'logreg' (its digits data set)"))
    if cfg.task.name.startswith("simulations.tasks.mlp:"):
        need.append(("sklearn", f"task {cfg.task.name!r} (its digits data set)"))
    for module, why in need:
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"'{module}' is needed for {why}: install the simulation extra, pip install 'secagg-dp[sim]'."
            )


def _check_scheduler(address: str, timeout: float = 5.0) -> None:
    """Refuse an unreachable Dask scheduler in seconds instead of after Dask's 30 s of retries."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or port is None:
        raise ConfigError(f"Argument '--scheduler' must look like tcp://host:port, not {address!r}.")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError(f"Argument '--scheduler': no Dask scheduler reachable at {address!r} ({exc}).") from None
