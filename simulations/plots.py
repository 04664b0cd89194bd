"""PNG plots of a run or a study (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_run", "plot_study", "metric_name"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def metric_name(doc: dict[str, Any]) -> str:
    return "mse" if doc["config"]["task"]["name"] == "mean" else "accuracy"


def _series(doc: dict[str, Any], metric: str) -> tuple[list[int], list[float], list[float]]:
    rounds, eps, vals = [], [], []
    for r in doc["rounds"]:
        if metric in r["metrics"]:
            rounds.append(r["round"])
            eps.append(r["epsilon"])
            vals.append(r["metrics"][metric])
    return rounds, eps, vals


def plot_run(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """metric and certified epsilon against rounds, and metric against epsilon; returns the PNG paths."""
    plt = _plt()
    out = Path(out_dir)
    metric = metric_name(doc)
    rounds, eps, vals = _series(doc, metric)
    all_rounds = [r["round"] for r in doc["rounds"]]
    all_eps = [r["epsilon"] for r in doc["rounds"]]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    axes[0].plot(rounds, vals, marker="o", ms=3)
    axes[0].set_xlabel("round")
    axes[0].set_ylabel(metric)
    if metric == "mse":
        axes[0].set_yscale("log")
    axes[1].plot(all_rounds, all_eps, marker="o", ms=3, color="C1")
    axes[1].set_xlabel("round")
    axes[1].set_ylabel(f"certified ε (δ={doc['privacy']['delta']:g})")
    fig.suptitle(doc["config"]["name"])
    fig.tight_layout()
    path = out / "rounds.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def plot_study(study: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """A study's ``study.png``. ``x = "epsilon"`` or ``"round"``: one line per variant, the metric against
    certified epsilon (or round) and epsilon against round. ``x`` = a swept key (e.g.
    ``"population.dropout"``): the metric averaged over the scored rounds and the final certified epsilon
    against that key, one line per combination of the other swept keys."""
    plt = _plt()
    out = Path(out_dir)
    runs = study["runs"]
    if not runs:
        return []
    metric = metric_name(runs[0]["results"])
    x_key = study["study"].get("x", "epsilon")
    delta = runs[0]["results"]["privacy"]["delta"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    if x_key in ("epsilon", "round"):
        _per_round(axes, runs, metric, x_key)
    else:
        _swept(axes, runs, metric, x_key)
    if metric == "mse":
        axes[0].set_yscale("log")
    axes[1].set_ylabel(f"certified ε (δ={delta:g})")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(study["study"]["name"])
    fig.tight_layout()
    path = out / "study.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _per_round(axes, runs: list[dict[str, Any]], metric: str, x_key: str) -> None:  # noqa: ANN001
    for i, run in enumerate(runs):
        doc = run["results"]
        rounds, eps, vals = _series(doc, metric)
        axes[0].plot(eps if x_key == "epsilon" else rounds, vals, marker="o", ms=3, label=run["label"], color=f"C{i % 10}")
        all_eps = [r["epsilon"] for r in doc["rounds"]]
        axes[1].plot(range(1, len(all_eps) + 1), all_eps, marker=".", label=run["label"], color=f"C{i % 10}")
    axes[0].set_xlabel("certified ε" if x_key == "epsilon" else "round")
    axes[0].set_ylabel(metric)
    axes[1].set_xlabel("round")


def _swept(axes, runs: list[dict[str, Any]], metric: str, x_key: str) -> None:  # noqa: ANN001
    groups: dict[str, list[tuple[Any, float, float]]] = {}
    for run in runs:
        values = run["values"]
        rest = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in values.items() if k != x_key)
        doc = run["results"]
        _, _, vals = _series(doc, metric)
        mean = sum(vals) / len(vals) if vals else float("nan")
        final = doc["rounds"][-1]["epsilon"] if doc["rounds"] else float("nan")
        groups.setdefault(rest, []).append((values[x_key], mean, final))
    for i, (label, pts) in enumerate(groups.items()):
        pts.sort(key=lambda p: p[0])
        xs = [p[0] for p in pts]
        axes[0].plot(xs, [p[1] for p in pts], marker="o", ms=4, label=label or None, color=f"C{i % 10}")
        axes[1].plot(xs, [p[2] for p in pts], marker="o", ms=4, label=label or None, color=f"C{i % 10}")
    name = x_key.split(".")[-1]
    axes[0].set_xlabel(name)
    axes[0].set_ylabel(f"{metric} (mean over rounds)")
    axes[1].set_xlabel(name)
    axes[1].set_title(f"after all rounds", fontsize=9)
