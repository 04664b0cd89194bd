"""Federated MLP on digits: distributed DDG and Skellam at 12-20 bits against Gaussian and non-private training.

The study of Kairouz, Liu & Steinke (2021, Sec. 6) on a workload that installs offline: the numpy MLP task
``simulations.tasks.mlp:MLPTask`` (64-32-10, scikit-learn's bundled digits, 200 clients with Dirichlet(0.5)
label skew), scenario ``simulations/configs/mlp_digits.toml`` (30 rounds, check-in p = 0.25, clip C = 1,
delta = 1e-5, client level, replace-one). Every private run is calibrated to a target epsilon with the same
accountant (the distributed check-in mixture of ``simulations.privacy``, method ``rdp``):

* DDG / Skellam (``run_scenario``: clip, rotate, round onto Z_q, discrete noise, modular sum, decode): the
  noise multiplier z is the smallest with the certified epsilon <= target at that bit width
  (``secagg_dp.accounting.core.calibration.calibrate_noise``);
* Gaussian: the same rounds with no quantisation, no modular wrap and continuous Gaussian noise of total std
  z c sqrt(K / E[K]) on the float sum of the clipped updates (the trusted-aggregator analogue), z calibrated
  with the same check-in accountant and its continuous Gaussian base (``GaussianSum``);
* non-private: the float sum of the unclipped updates, no noise.

Panel 1: accuracy vs epsilon in {2, 4, 8, 16} at 16 bits. Panel 2: accuracy vs bits in {12, 14, 16, 18, 20} at
epsilon = 4. Accuracy is the test accuracy averaged over the last 5 rounds (and over ``--seeds`` root seeds).
Written: the figure (``--figure``, default docs/img/mlp_digits.png) and its data next to it (.json).
Timing: wall seconds of every run and its ratio to the non-private run of the same size in this process
(the floor: the same local training without clip, encode, noise, aggregation or accounting).

    python benchmarks/bench_mlp_digits.py               # default size (figure in docs/img/)
    python benchmarks/bench_mlp_digits.py --quick --figure /tmp/mlp.png   # 4 rounds, 2 targets, 2 bit widths
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from secagg_dp.accounting.checkin.accountant import CheckinAccountant
from secagg_dp.accounting.checkin.events import CheckinRound
from secagg_dp.accounting.checkin.providers import checkin_provider
from secagg_dp.accounting.core.calibration import calibrate_noise
from secagg_dp.errors import ConfigError
from simulations.clients import BLOCK
from simulations.config import SimConfig, load_config
from simulations.privacy import ORDERS, checkin_provider_for, effective_gamma
from simulations.runner import plan, run_scenario, select_participants
from simulations.tasks import make_task

ROOT = Path(__file__).resolve().parents[1]
EPS_TARGETS = (2.0, 4.0, 8.0, 16.0)
BITS = (12, 14, 16, 18, 20)
EPS_FOR_BITS = 4.0
LAST = 5  # accuracy: mean over the last LAST rounds


def scenario(overrides: list[str]) -> SimConfig:
    return load_config("mlp_digits", ["study.grid={}", *overrides])


def _epsilon(cfg: SimConfig, provider: Any) -> float:
    """The analyst's certified epsilon after the planned rounds (the run's method), from a per-k provider."""
    event = CheckinRound(
        provider=provider,
        clients=cfg.population.clients,
        gamma=effective_gamma(cfg.population.checkin, cfg.population.dropout),
        sample_size=None,
        neighbouring=provider.neighbouring,
    )
    acc = CheckinAccountant(cfg.privacy.method, provider.neighbouring, orders=ORDERS, observer="analyst")
    return float(acc.compose(event, cfg.rounds).certificate(cfg.privacy.delta).epsilon)


def discrete_epsilon(base: list[str], mechanism: str, bits: int, z: float, root: int) -> float:
    """Certified epsilon of the discrete run at noise multiplier z; 0 where z is more noise than ``bits`` can
    carry (the scale rule refuses: only used to bracket the calibration, such a z is never run)."""
    cfg = scenario([*base, f"privacy.mechanism={mechanism}", f"secagg.bits={bits}", f"privacy.noise_multiplier={z!r}"])
    try:
        p = plan(cfg, root)
    except ConfigError:
        return 0.0
    return _epsilon(cfg, checkin_provider_for(cfg, p))


def gaussian_epsilon(cfg: SimConfig, z: float) -> float:
    c, n_exp = cfg.privacy.clip, cfg.population.expected_checkins
    provider = checkin_provider("gaussian", cfg.population.clients, sigma=z * c / math.sqrt(n_exp), l2_sensitivity=c)
    return _epsilon(cfg, provider)


def calibrate(epsilon_of: Any, target: float) -> float:
    return calibrate_noise(epsilon_of, target, lo=0.5, hi=20.0, rtol=2e-3)


def float_run(cfg: SimConfig, root: int, z: float | None) -> tuple[list[float], float]:
    """The baselines: per-round accuracy of the float sum (``z``: clipped + Gaussian noise; None: no clip, no noise)."""
    task = make_task(cfg)
    model = task.init_model(root)
    c, n_exp = cfg.privacy.clip, cfg.population.expected_checkins
    accs = []
    t0 = time.perf_counter()
    for r in range(1, cfg.rounds + 1):
        ids = select_participants(cfg, root, r)  # the simulator's check-in coins (no dropout in this study)
        total = np.zeros(task.vector_dim)
        for i in range(0, len(ids), BLOCK):
            rows = task.client_vectors(model, ids[i : i + BLOCK], r, root)
            if z is not None:
                norms = np.linalg.norm(rows, axis=1, keepdims=True)
                rows = rows * np.minimum(1.0, c / np.maximum(norms, 1e-300))
            total += rows.sum(axis=0)
        if z is not None:
            rng = np.random.default_rng(np.random.SeedSequence(root, spawn_key=(9, r)))
            total += rng.normal(0.0, z * c * math.sqrt(len(ids) / n_exp), task.vector_dim)
        model, metrics = task.server_update(model, total, len(ids), root)
        accs.append(metrics["accuracy"])
    return accs, time.perf_counter() - t0


def sim_run(cfg: SimConfig, root: int, out: Path) -> tuple[list[float], float, float]:
    t0 = time.perf_counter()
    doc = run_scenario(cfg, out)
    assert doc["status"] == "complete", doc["status"]
    return [r["metrics"]["accuracy"] for r in doc["rounds"]], float(doc["privacy"]["epsilon"]), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 rounds, 2 epsilon targets, 2 bit widths (smoke run)")
    ap.add_argument("--seeds", type=int, default=1, help="root seeds per point (accuracy averaged)")
    ap.add_argument("--figure", default=str(ROOT / "docs" / "img" / "mlp_digits.png"))
    args = ap.parse_args()
    targets, bits_grid = (EPS_TARGETS[1:3], (12, 16)) if args.quick else (EPS_TARGETS, BITS)
    rounds = ["rounds=4"] if args.quick else []
    start = time.perf_counter()
    points: list[dict[str, Any]] = []
    timing: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for s in range(args.seeds):
            root = s
            base = scenario([*rounds, f"seed={root}"])
            accs, secs = float_run(base, root, None)
            points.append({"mechanism": "non-private", "seed": root, "accuracy": float(np.mean(accs[-LAST:]))})
            timing.setdefault("non-private", []).append(secs)
            jobs = [(m, 16, e) for e in targets for m in ("ddg", "skellam")]
            jobs += [(m, b, EPS_FOR_BITS) for b in bits_grid if b != 16 for m in ("ddg", "skellam")]
            for e in targets:
                t0 = time.perf_counter()
                z = calibrate(lambda x: gaussian_epsilon(base, x), e)
                t_cal = time.perf_counter() - t0
                accs, secs = float_run(base, root, z)
                points.append(
                    {"mechanism": "gaussian", "seed": root, "target": e, "z": z, "epsilon": gaussian_epsilon(base, z),
                     "accuracy": float(np.mean(accs[-LAST:])), "calibration_s": t_cal}  # fmt: skip
                )
                timing.setdefault("gaussian", []).append(secs)
            for mech, bits, e in jobs:
                t0 = time.perf_counter()
                z = calibrate(lambda x, m=mech, b=bits: discrete_epsilon(rounds, m, b, x, root), e)
                t_cal = time.perf_counter() - t0
                cfg = scenario([*rounds, f"seed={root}", f"privacy.mechanism={mech}", f"secagg.bits={bits}",
                                f"privacy.noise_multiplier={z!r}"])  # fmt: skip
                try:
                    accs, eps, secs = sim_run(cfg, root, Path(tmp) / f"{mech}-{bits}-{e:g}-{root}")
                except ConfigError as exc:  # the target needs more noise than the bit width can carry
                    print(f"  {mech:8s} {bits:2d} bits  eps target {e:g}: not reachable ({exc})"[:160], flush=True)
                    points.append({"mechanism": mech, "bits": bits, "seed": root, "target": e, "z": z,
                                   "accuracy": math.nan, "unreachable": str(exc)})  # fmt: skip
                    continue
                points.append(
                    {"mechanism": mech, "bits": bits, "seed": root, "target": e, "z": z, "epsilon": eps,
                     "accuracy": float(np.mean(accs[-LAST:])), "calibration_s": t_cal}  # fmt: skip
                )
                timing.setdefault(mech, []).append(secs)
                print(f"  {mech:8s} {bits:2d} bits  eps {eps:7.4f} (target {e:g})  z {z:6.3f}  "
                      f"acc {points[-1]['accuracy']:.3f}  {secs:5.1f} s", flush=True)  # fmt: skip
    total = time.perf_counter() - start
    floor = float(np.mean(timing["non-private"]))
    print(f"\nwall time {total:.0f} s for the whole study ({args.seeds} seed(s)); per run, ratio to the non-private run:")
    for k, v in timing.items():
        print(f"  {k:12s} {np.mean(v):6.2f} s   x{np.mean(v) / floor:5.2f}")
    doc = {
        "config": "simulations/configs/mlp_digits.toml",
        "command": "python benchmarks/bench_mlp_digits.py" + (" --quick" if args.quick else ""),
        "seeds": args.seeds,
        "accuracy": f"test accuracy, mean over the last {LAST} rounds",
        "epsilon_targets": list(targets),
        "bits": list(bits_grid),
        "epsilon_for_bits": EPS_FOR_BITS,
        "points": points,
        "wall_seconds": total,
        "verdict": verdict(points),
    }
    print("\n" + doc["verdict"])
    fig = Path(args.figure)
    fig.parent.mkdir(parents=True, exist_ok=True)
    fig.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, fig)
    print(f"figure: {fig}  data: {fig.with_suffix('.json')}")


def _mean(points: list[dict[str, Any]], **match: Any) -> float:
    vals = [p["accuracy"] for p in points if all(p.get(k) == v for k, v in match.items())]
    return float(np.mean(vals)) if vals else math.nan


def verdict(points: list[dict[str, Any]]) -> str:
    """Largest accuracy gap between the discrete mechanisms at >= 16 bits and the Gaussian at the same epsilon."""
    gaps = []
    for p in points:
        if p["mechanism"] in ("ddg", "skellam") and p["bits"] >= 16:
            g = _mean(points, mechanism="gaussian", target=p["target"], seed=p["seed"])
            gaps.append(abs(p["accuracy"] - g))
    gap = max(gaps) if gaps else math.nan
    return (
        f"largest |accuracy(DDG or Skellam, >= 16 bits) - accuracy(Gaussian)| at the same epsilon: {gap:.3f} "
        f"over {len(gaps)} points"
    )


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = doc["points"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    top = _mean(pts, mechanism="non-private")
    styles = {"gaussian": ("k", "o", "-"), "ddg": ("C0", "s", "--"), "skellam": ("C1", "^", ":")}
    labels = {"gaussian": "Gaussian (float sum)", "ddg": "DDG, 16 bits", "skellam": "Skellam, 16 bits"}
    for mech, (col, mk, ls) in styles.items():
        xs = doc["epsilon_targets"]
        ys = [_mean(pts, mechanism=mech, target=e, **({} if mech == "gaussian" else {"bits": 16})) for e in xs]
        a1.plot(xs, ys, color=col, marker=mk, linestyle=ls, mfc="none", label=labels[mech])
    a1.axhline(top, color="grey", lw=1, label="non-private")
    a1.set(xscale="log", xlabel="certified ε (analyst, δ = 1e-5)", ylabel="test accuracy", title="accuracy vs ε")
    a1.set_xticks(doc["epsilon_targets"], [f"{e:g}" for e in doc["epsilon_targets"]])
    e4 = doc["epsilon_for_bits"]
    for mech in ("ddg", "skellam"):
        col, mk, ls = styles[mech]
        ys = [_mean(pts, mechanism=mech, bits=b, target=e4) for b in doc["bits"]]
        a2.plot(doc["bits"], ys, color=col, marker=mk, linestyle=ls, mfc="none", label=mech.upper())
    a2.axhline(_mean(pts, mechanism="gaussian", target=e4), color="k", lw=1, label="Gaussian")
    a2.axhline(top, color="grey", lw=1, label="non-private")
    a2.set(xlabel="bits per coordinate", ylabel="test accuracy", title=f"accuracy vs bits at ε = {e4:g}")
    for ax in (a1, a2):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(
        "Federated MLP on digits, 200 non-IID clients, p = 0.25, 30 rounds, client-level replace-one "
        f"({doc['seeds']} seed(s))",
        fontsize=9,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
