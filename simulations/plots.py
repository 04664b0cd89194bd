"""PNG plots of a run or a study (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_run", "plot_study", "metric_name", "metric_names", "describe", "epsilon_label", "observer_note"]


def _use_agg() -> None:
    """Select the Agg backend (files only, no display) before pyplot is imported."""
    import matplotlib

    matplotlib.use("Agg")


def metric_name(doc: dict[str, Any]) -> str:
    """The plotted utility: MSE for mean estimation, else accuracy, else a task's first reported metric."""
    if doc["config"]["task"]["name"] == "mean":
        return "mse"
    for r in doc["rounds"]:
        if r["metrics"]:
            return "accuracy" if "accuracy" in r["metrics"] else str(next(iter(r["metrics"])))
    return "accuracy"


def metric_names(doc: dict[str, Any]) -> list[str]:
    """Every metric the run's rounds report, in the order they first appear (the plotted one,
    :func:`metric_name`, first); ``[metric_name(doc)]`` when no round reported any."""
    first = metric_name(doc)
    names = dict.fromkeys(str(k) for r in doc["rounds"] for k in r["metrics"])
    return [first, *(n for n in names if n != first)] if first in names else list(names) or [first]


def _series(doc: dict[str, Any], metric: str) -> tuple[list[int], list[float], list[float]]:
    rounds, eps, vals = [], [], []
    for r in doc["rounds"]:
        if metric in r["metrics"]:
            rounds.append(r["round"])
            eps.append(r["epsilon"])
            vals.append(r["metrics"][metric])
    return rounds, eps, vals


_STYLES = (("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", (0, (5, 1))), ("P", (0, (3, 1, 1, 1))))


def _style(i: int) -> dict[str, Any]:
    """Distinct colour, hollow marker and line style per series, so coinciding series stay visible."""
    marker, ls = _STYLES[i % len(_STYLES)]
    return {"color": f"C{i % 10}", "marker": marker, "linestyle": ls, "mfc": "none", "ms": 5}


def describe(doc: dict[str, Any], swept: tuple[str, ...] = ()) -> str:
    """The run's parameters for a title: n, p, p', z, bits, mechanism, δ; swept keys are marked."""
    c = doc["config"]
    parts = [
        ("population.clients", "n", c["population"]["clients"]),
        ("population.checkin", "p", c["population"]["checkin"]),
        ("population.dropout", "p'", c["population"]["dropout"]),
        ("privacy.noise_multiplier", "z", c["privacy"]["noise_multiplier"]),
        ("secagg.bits", "bits", c["secagg"]["bits"]),
        ("privacy.mechanism", "noise", c["privacy"]["mechanism"]),
        ("privacy.delta", "δ", c["privacy"]["delta"]),
        ("rounds", "T", c["rounds"]),
    ]
    if c["task"]["name"] == "logreg":
        parts.append(("task.local_steps", "local steps", c["task"]["local_steps"]))
    return ", ".join(
        f"{short}={'swept' if key in swept else (f'{v:g}' if isinstance(v, float) else v)}" for key, short, v in parts
    )


def epsilon_label(privacy: dict[str, Any]) -> str:
    """The ε axis label: whose certificate is plotted (results.json ``privacy.observer``; the rounds' epsilon
    is that observer's) and at which δ, e.g. ``certified ε, analyst view (δ=1e-05)``."""
    return f"certified ε, {privacy.get('observer', 'analyst')} view (δ={privacy['delta']:g})"


def observer_note(privacy: dict[str, Any]) -> str:
    """What the plotted observer sees, for the ε panel's title."""
    observer = privacy.get("observer", "analyst")
    sees = {"analyst": "sees K and the aggregates, not who took part", "server": "also sees who took part"}
    return f"ε for the {observer} ({sees[observer]})" if observer in sees else f"ε for the {observer}"


def plot_run(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Every metric the rounds report against the round (one panel each, log scale for MSE) and the certified
    epsilon against the round (last panel); returns the PNG paths."""
    _use_agg()
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    metrics = metric_names(doc)
    all_rounds = [r["round"] for r in doc["rounds"]]
    all_eps = [r["epsilon"] for r in doc["rounds"]]
    cols = len(metrics) + 1
    fig, axes = plt.subplots(1, cols, figsize=(4.5 * cols, 3.6), squeeze=False)
    for i, metric in enumerate(metrics):
        ax = axes[0][i]
        rounds, _, vals = _series(doc, metric)
        base = doc.get("baseline")
        label = "private" if base else None
        ax.plot(rounds, vals, marker="o", ms=3, color=f"C{i + 1 if i else 0}", label=label)
        if base:  # the same seeded scenario without noise (results.json "baseline")
            b_rounds = [r["round"] for r in base["rounds"] if metric in r["metrics"]]
            b_vals = [r["metrics"][metric] for r in base["rounds"] if metric in r["metrics"]]
            ax.plot(b_rounds, b_vals, marker="s", ms=3, mfc="none", linestyle="--", color="0.35", label="no noise")
            ax.legend(fontsize=8)
            vals = vals + b_vals
        ax.set_xlabel("round")
        ax.set_ylabel(metric)
        if metric == "mse" and any(v > 0 for v in vals):
            ax.set_yscale("log")
    ax = axes[0][-1]
    ax.plot(all_rounds, all_eps, marker="o", ms=3, color="C1")
    ax.set_xlabel("round")
    ax.set_ylabel(epsilon_label(doc["privacy"]))
    ax.set_title(observer_note(doc["privacy"]), fontsize=8)
    fig.suptitle(f"{doc['config']['name']} (seed {doc['config']['seed']})\n{describe(doc)}", fontsize=9)
    return _save(fig, out / "rounds.png")


def plot_study(study: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """A study's ``study.png``. ``x = "epsilon"`` or ``"round"``: one line per variant, the metric against
    certified epsilon (or round) and epsilon against round. ``x`` = a swept key (e.g.
    ``"population.dropout"``): the metric averaged over the scored rounds and the final certified epsilon
    against that key, one line per combination of the other swept keys. With several seeds per variant
    the metric is the mean over seeds with ± one standard deviation as error bars; the title gives the
    run's parameters and the number of seeds."""
    _use_agg()
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    runs = study["runs"]
    if not runs:
        return []
    metric = metric_name(runs[0]["results"])
    x_key = study["study"].get("x", "epsilon")
    privacy = runs[0]["results"]["privacy"]
    n_seeds = len({r.get("seed") for r in runs})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    if x_key in ("epsilon", "round"):
        _per_round(axes, runs, metric, x_key)
    else:
        _swept(axes, runs, metric, x_key)
    if metric == "mse":
        axes[0].set_yscale("log")
    axes[1].set_ylabel(epsilon_label(privacy))
    axes[1].set_title(observer_note(privacy), fontsize=8)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    swept = tuple(study["study"].get("grid", {}))
    seeds = f"mean ± std over {n_seeds} seeds" if n_seeds > 1 else "1 seed"
    fig.suptitle(f"{study['study']['name']} ({seeds})\n{describe(runs[0]['results'], swept)}", fontsize=9)
    return _save(fig, out / "study.png")


def _save(fig: Any, path: Path) -> list[Path]:
    """Lay out ``fig``, write it to ``path`` (110 dpi) and close it; the files written."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _by_label(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(run["label"], []).append(run)
    return groups


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    m = sum(values) / len(values)
    return m, (sum((v - m) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0


def _per_round(axes: Sequence[Axes], runs: list[dict[str, Any]], metric: str, x_key: str) -> None:
    for i, (label, group) in enumerate(_by_label(runs).items()):
        per_round: dict[int, list[float]] = {}
        eps_at: dict[int, float] = {}
        for run in group:
            for r in run["results"]["rounds"]:
                eps_at[r["round"]] = r["epsilon"]  # the certificate depends on the config, not the seed
                if metric in r["metrics"]:
                    per_round.setdefault(r["round"], []).append(r["metrics"][metric])
        xs = sorted(per_round)
        stats = [_mean_std(per_round[x]) for x in xs]
        xplot = [eps_at[x] for x in xs] if x_key == "epsilon" else xs
        axes[0].errorbar(xplot, [m for m, _ in stats], yerr=[s for _, s in stats], capsize=2, label=label, **_style(i))
        rounds = sorted(eps_at)
        axes[1].plot(rounds, [eps_at[r] for r in rounds], label=label, **_style(i))
    axes[0].set_xlabel(epsilon_label(runs[0]["results"]["privacy"]) if x_key == "epsilon" else "round")
    axes[0].set_ylabel(metric)
    axes[1].set_xlabel("round")


def _swept(axes: Sequence[Axes], runs: list[dict[str, Any]], metric: str, x_key: str) -> None:
    groups: dict[str, dict[Any, tuple[list[float], float]]] = {}
    for run in runs:
        values = run["values"]
        rest = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in values.items() if k != x_key)
        doc = run["results"]
        _, _, vals = _series(doc, metric)
        mean = sum(vals) / len(vals) if vals else float("nan")
        final = doc["rounds"][-1]["epsilon"] if doc["rounds"] else float("nan")
        means, _ = groups.setdefault(rest, {}).setdefault(values[x_key], ([], final))
        means.append(mean)
    xs_all = sorted({x for pts in groups.values() for x in pts})
    gap = min((b - a for a, b in zip(xs_all, xs_all[1:], strict=False)), default=1.0)
    for i, (label, pts) in enumerate(groups.items()):
        xs = sorted(pts)
        # a small horizontal offset per series keeps coinciding series apart; the tick labels stay exact
        shift = (i - (len(groups) - 1) / 2) * 0.06 * gap
        stats = [_mean_std(pts[x][0]) for x in xs]
        axes[0].errorbar(
            [x + shift for x in xs],
            [m for m, _ in stats],
            yerr=[s for _, s in stats],
            capsize=2,
            label=label or None,
            **_style(i),
        )
        axes[1].plot([x + shift for x in xs], [pts[x][1] for x in xs], label=label or None, **_style(i))
    name = x_key.split(".")[-1]
    for ax in axes:
        ax.set_xlabel(name)
        ax.set_xticks(xs_all)
    axes[0].set_ylabel(f"{metric} (mean over rounds)")
    axes[1].set_title("after all rounds", fontsize=9)
