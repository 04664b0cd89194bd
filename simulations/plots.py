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
    """One line per variant: utility against certified epsilon (or against the swept parameter)."""
    plt = _plt()
    out = Path(out_dir)
    runs = study["runs"]
    if not runs:
        return []
    metric = metric_name(runs[0]["results"])
    x_key = study["study"].get("x", "epsilon")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, run in enumerate(runs):
        doc = run["results"]
        _, eps, vals = _series(doc, metric)
        xs = eps if x_key == "epsilon" else [r["round"] for r in doc["rounds"] if metric in r["metrics"]]
        axes[0].plot(xs, vals, marker="o", ms=3, label=run["label"], color=f"C{i % 10}")
        all_eps = [r["epsilon"] for r in doc["rounds"]]
        axes[1].plot(range(1, len(all_eps) + 1), all_eps, marker=".", label=run["label"], color=f"C{i % 10}")
    axes[0].set_xlabel("certified ε" if x_key == "epsilon" else "round")
    axes[0].set_ylabel(metric)
    if metric == "mse":
        axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
    delta = runs[0]["results"]["privacy"]["delta"]
    axes[1].set_xlabel("round")
    axes[1].set_ylabel(f"certified ε (δ={delta:g})")
    axes[1].legend(fontsize=7)
    fig.suptitle(study["study"]["name"])
    fig.tight_layout()
    path = out / "study.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
