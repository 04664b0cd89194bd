"""Run a scenario or a study grid (several scenario variants) and write results + plots into one folder."""

from __future__ import annotations

import math
import re
import secrets
from pathlib import Path
from typing import Any

from simulations.config import SimConfig, expand_study
from simulations.results import STUDY_SCHEMA, write_atomic

__all__ = ["run", "summary_rows", "observer_lines", "format_table", "collapse_lines"]


def _slug(i: int, label: str) -> str:
    return f"{i:02d}-" + (re.sub(r"[^A-Za-z0-9.=_-]+", "_", label).strip("_") or "run")


def run(
    cfg: SimConfig,
    out_dir: str | Path,
    *,
    executor: Any = None,
    progress: bool = False,
    plots: bool = True,
    on_round: Any = None,
    task: Any = None,
) -> dict[str, Any]:
    """Run ``cfg`` (a single scenario, or every variant of its ``[study]`` grid) into ``out_dir``.

    ``task``: a :class:`simulations.Task` object for every variant (default: the task each variant names).

    Every variant is validated (including the bit-width feasibility) before the first one starts. A study
    uses one root seed for all variants so they see the same data, check-in coins and noise seeds; with
    ``study.seeds = m`` every variant runs m times, with root seeds root, root + 1, ..., root + m - 1.
    """
    from simulations.runner import plan, run_scenario

    out = Path(out_dir)
    variants = expand_study(cfg)
    root = cfg.seed if cfg.seed is not None else secrets.randbits(63)
    variants = [(label, vals, _with_seed(v, root)) for label, vals, v in variants]
    from simulations.privacy import make_accountant

    for _, _, v in variants:  # every variant's codec budget and certificate, before any work
        make_accountant(v, plan(v, root, task), None).close()
    seeds = cfg.study.seeds
    if not cfg.study.grid and seeds == 1:
        doc = run_scenario(variants[0][2], out, executor=executor, progress=progress, on_round=on_round, task=task)
        if plots:
            from simulations.plots import plot_run

            doc["plots"] = [p.name for p in plot_run(doc, out)]
            write_atomic(out / "results.json", doc)
        return doc
    study: dict[str, Any] = {
        "schema": STUDY_SCHEMA,
        "status": "running",
        "study": {"name": cfg.name, "grid": cfg.study.grid, "x": cfg.study.x, "seed": root, "seeds": seeds},
        "runs": [],
    }
    label, sub, v = variants[0][0], out, variants[0][2]  # named in the failure record if the study fails
    try:
        for i, (label, vals, variant) in enumerate(variants):
            for j in range(seeds):
                v = _with_seed(variant, (root + j) % 2**63)
                sub = out / (_slug(i, label) + (f"-seed{j}" if seeds > 1 else ""))
                doc = run_scenario(v, sub, executor=executor, progress=progress, on_round=on_round, task=task)
                if plots:
                    from simulations.plots import plot_run

                    doc["plots"] = [p.name for p in plot_run(doc, sub)]
                    write_atomic(sub / "results.json", doc)
                study["runs"].append({"label": label, "values": vals, "seed": v.seed, "out": sub.name, "results": doc})
                write_atomic(out / "results.json", study)
        study["status"] = "complete"
    except KeyboardInterrupt:
        study["status"] = "interrupted"
        raise
    except BaseException as exc:
        study["status"] = "failed"
        study["failure"] = _failure(exc, sub, label, v.seed)
        raise
    finally:
        write_atomic(out / "results.json", study)
    if plots:
        from simulations.plots import plot_study

        study["plots"] = [p.name for p in plot_study(study, out)]
        write_atomic(out / "results.json", study)
    return study


def _failure(exc: BaseException, sub: Path, label: str, seed: int | None) -> dict[str, Any]:
    """A failed study's ``failure``: the failed run's own record (its results.json ``failure``: type, message,
    round, rounds_completed) with the variant's ``label``, ``seed`` and folder ``out``."""
    import json

    from simulations.runner import failure_record

    try:
        rec = json.loads((sub / "results.json").read_text(encoding="utf-8"))["failure"]
    except (OSError, ValueError, KeyError, TypeError):  # the run failed before writing its record
        rec = failure_record(exc, None, 0)
    return {**rec, "label": label, "seed": seed, "out": sub.name}


def _with_seed(cfg: SimConfig, root: int) -> SimConfig:
    from dataclasses import replace

    return replace(cfg, seed=root)


def summary_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per run: label, rounds, mean participants, certified epsilon, final utility and, in crypto
    mode, the mean kB each participating client uploaded and downloaded per round."""
    runs = doc["runs"] if "runs" in doc else [{"label": doc["config"]["name"], "results": doc}]
    rows = []
    for run in runs:
        res = run["results"]
        s = res["summary"]
        row = {
            "run": run["label"] + (f" seed={run['seed']}" if doc.get("study", {}).get("seeds", 1) > 1 else ""),
            "mode": res["config"]["mode"],
            "rounds": s.get("rounds_completed", 0),
            "included/round": s.get("mean_included", 0.0),
            "aborted": s.get("aborted_rounds", 0),
            "epsilon": s.get("epsilon", 0.0),
            "delta": s.get("delta"),
            "method": s.get("method"),
        }
        row.update(s.get("final_metrics", {}))
        comm = s.get("communication")
        if comm:  # crypto mode: mean bytes per participating client per round, in kB (10^3 bytes)
            row["up kB/client"] = comm["upload_bytes_mean"] / 1e3
            row["down kB/client"] = comm["download_bytes_mean"] / 1e3
        row["seconds"] = s.get("seconds", 0.0)
        rows.append(row)
    return rows


def collapse_lines(lines: list[str]) -> list[str]:
    """``lines`` with repeats removed, in first-seen order; a line that occurred n > 1 times ends with
    ``(identical for n runs)`` (a study's seeds of one variant share its certificate, so its lines repeat)."""
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    return [line if n == 1 else f"{line}  (identical for {n} runs)" for line, n in counts.items()]


def observer_lines(doc: dict[str, Any]) -> list[str]:
    """One line per run and observer: the analyst's certificate (sees K and the aggregate), the
    secure-aggregation server's (also sees who took part and who dropped) and the coalition's (an active server
    with c colluding clients, which may shrink a sum to m clients). Identical lines (the seeds of one variant)
    are printed once, with their count (:func:`collapse_lines`)."""
    runs = doc["runs"] if "runs" in doc else [{"label": doc["config"]["name"], "results": doc}]
    lines = []
    for run in runs:
        priv = run["results"].get("privacy", {})
        server = priv.get("server") or {}
        unit = priv.get("unit", "client")
        lines.append(
            f"{run['label']}: observer analyst (sees K and the aggregate): epsilon = "
            f"{priv.get('epsilon', 0.0):.6g} at delta = {priv.get('delta')} ({unit} level)"
        )
        if server:
            lines.append(
                f"{run['label']}: observer server (also sees who took part and who dropped): epsilon = "
                f"{server['epsilon']:.6g} at delta = {priv.get('delta')} ({unit} level)"
            )
        coalition = priv.get("coalition") or {}
        if coalition:
            eps, c = coalition["epsilon"], coalition["colluders"]
            lines.append(
                f"{run['label']}: observer coalition (an active server with {c} colluding client{'' if c == 1 else 's'}"
                f", sums down to {coalition['min_sum']} clients): epsilon = "
                f"{math.inf if eps is None else eps:.6g} at delta = {priv.get('delta')} ({unit} level)"
            )
    return collapse_lines(lines)


def format_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no runs)"
    cols = list(dict.fromkeys(k for r in rows for k in r))

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    cells = [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = [
        "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths, strict=True)))
        for row in cells
    ]
    return "\n".join([line, sep, *body])
