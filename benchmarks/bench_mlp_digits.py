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
  with the same check-in accountant and its continuous Gaussian base (``GaussianSum``), twice: with the
  subsampling bound the discrete runs get (Wang, Balle & Kasiviswanathan 2019, Thm 9, capped by joint
  convexity: ``gaussian``, the like-for-like comparison of the noise) and with the tight Gaussian-only
  dominating pair (Zhu, Dong & Wang 2022: ``gaussian-tight``, what a central Gaussian is certified today);
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


class _GenericBase:
    """A base mechanism seen without its Gaussian structure (no ``noise_multiplier``), so the check-in
    mixture's ``amplification="auto"`` bounds it exactly as it bounds DDG and Skellam: WBK19 Theorem 9,
    never above the joint-convexity term."""

    def __init__(self, mech: Any) -> None:
        self._mech = mech

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        return np.asarray(self._mech.rdp_upper(k_lo, k_hi, orders))

    def __getattr__(self, name: str) -> Any:
        if name == "noise_multiplier" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._mech, name)


def gaussian_epsilon(cfg: SimConfig, z: float, bound: str) -> float:
    """Certified epsilon of the continuous Gaussian baseline: ``bound`` "same" (the discrete mechanisms'
    subsampling bound) or "tight" (the Gaussian-only dominating pair, ``amplification="auto"``)."""
    from dataclasses import replace

    c, n_exp = cfg.privacy.clip, cfg.population.expected_checkins
    provider = checkin_provider("gaussian", cfg.population.clients, sigma=z * c / math.sqrt(n_exp), l2_sensitivity=c)
    if bound == "same":
        provider = replace(provider, mechanism=_GenericBase(provider.mechanism))
    return _epsilon(cfg, provider)


def calibrate(epsilon_of: Any, target: float) -> float:
    return calibrate_noise(epsilon_of, target, lo=1.0, hi=16.0, rtol=2e-3)


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


def sim_run(cfg: SimConfig, root: int, out: Path) -> tuple[list[float], float, float, dict[str, Any]]:
    t0 = time.perf_counter()
    doc = run_scenario(cfg, out)
    assert doc["status"] == "complete", doc["status"]
    secs = time.perf_counter() - t0
    d = doc["derived"]
    derived = {
        "scale": d["scale"],
        "inflation": d["l2_sensitivity"] / d["scale"],
        "wrap_bound": d["wrap_probability_bound"],
    }
    return [r["metrics"]["accuracy"] for r in doc["rounds"]], float(doc["privacy"]["epsilon"]), secs, derived


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 rounds, 2 epsilon targets, 2 bit widths (smoke run)")
    ap.add_argument("--seeds", type=int, default=3, help="root seeds per point (accuracy averaged)")
    ap.add_argument("--figure", default=str(ROOT / "docs" / "img" / "mlp_digits.png"))
    ap.add_argument("--replot", metavar="JSON", help="redraw the figure from a data file of an earlier run")
    args = ap.parse_args()
    if args.replot:
        plot(json.loads(Path(args.replot).read_text()), Path(args.figure))
        return
    targets, bits_grid = (EPS_TARGETS[1:3], (12, 16)) if args.quick else (EPS_TARGETS, BITS)
    rounds = ["rounds=4"] if args.quick else []
    start = time.perf_counter()
    points: list[dict[str, Any]] = []
    timing: dict[str, list[float]] = {}
    zs: dict[tuple[str, int, float], float] = {}  # calibrated z per (mechanism, bits, target): seed-independent
    cal_seconds = 0.0
    jobs = [(m, 16, e) for e in targets for m in ("ddg", "skellam")]
    jobs += [(m, b, EPS_FOR_BITS) for b in bits_grid if b != 16 for m in ("ddg", "skellam")]
    gauss = {"gaussian": "same", "gaussian-tight": "tight"}
    with tempfile.TemporaryDirectory() as tmp:
        for root in range(args.seeds):
            base = scenario([*rounds, f"seed={root}"])
            make_task(base).evaluate(make_task(base).init_model(root), root)  # load and split the data: untimed
            accs, secs = float_run(base, root, None)
            points.append({"mechanism": "non-private", "seed": root, "accuracy": float(np.mean(accs[-LAST:]))})
            timing.setdefault("non-private", []).append(secs)
            for e in targets:
                for name, amp in gauss.items():
                    if (name, 0, e) not in zs:
                        t0 = time.perf_counter()
                        zs[name, 0, e] = calibrate(lambda x, a=amp, c=base: gaussian_epsilon(c, x, a), e)
                        cal_seconds += time.perf_counter() - t0
                    z = zs[name, 0, e]
                    accs, secs = float_run(base, root, z)
                    points.append(
                        {
                            "mechanism": name,
                            "seed": root,
                            "target": e,
                            "z": z,
                            "epsilon": gaussian_epsilon(base, z, amp),
                            "accuracy": float(np.mean(accs[-LAST:])),
                        }  # fmt: skip
                    )
                    timing.setdefault(name, []).append(secs)
                    print(f"  {name:14s}      eps {points[-1]['epsilon']:7.4f} (target {e:g})  z {z:6.3f}  "
                          f"acc {points[-1]['accuracy']:.3f}  {secs:5.1f} s", flush=True)  # fmt: skip
            for mech, bits, e in jobs:
                if (mech, bits, e) not in zs:
                    t0 = time.perf_counter()
                    zs[mech, bits, e] = calibrate(
                        lambda x, m=mech, b=bits, r=root: discrete_epsilon(rounds, m, b, x, r), e
                    )
                    cal_seconds += time.perf_counter() - t0
                z = zs[mech, bits, e]
                cfg = scenario([*rounds, f"seed={root}", f"privacy.mechanism={mech}", f"secagg.bits={bits}",
                                f"privacy.noise_multiplier={z!r}"])  # fmt: skip
                try:
                    accs, eps, secs, derived = sim_run(cfg, root, Path(tmp) / f"{mech}-{bits}-{e:g}-{root}")
                except ConfigError as exc:  # the target needs more noise than the bit width can carry
                    print(f"  {mech:14s} {bits:2d} bits  eps target {e:g}: not reachable ({exc})"[:160], flush=True)
                    points.append({"mechanism": mech, "bits": bits, "seed": root, "target": e, "z": z,
                                   "accuracy": math.nan, "unreachable": str(exc)})  # fmt: skip
                    continue
                points.append(
                    {
                        "mechanism": mech,
                        "bits": bits,
                        "seed": root,
                        "target": e,
                        "z": z,
                        "epsilon": eps,
                        "accuracy": float(np.mean(accs[-LAST:])),
                        **derived,
                    }
                )
                timing.setdefault(mech, []).append(secs)
                print(f"  {mech:14s} {bits:2d} bits  eps {eps:7.4f} (target {e:g})  z {z:6.3f}  "
                      f"acc {points[-1]['accuracy']:.3f}  {secs:5.1f} s", flush=True)  # fmt: skip
    total = time.perf_counter() - start
    floor = float(np.mean(timing["non-private"]))
    print(
        f"\nwall time {total:.0f} s for the whole study ({args.seeds} seed(s)), "
        f"of which {cal_seconds:.0f} s calibration"
    )
    print("per run (training only), ratio to the non-private run:")
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
        "calibration_seconds": cal_seconds,
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
    """Accuracy gaps between the discrete mechanisms at >= 16 bits and the Gaussian at the same epsilon
    (seed-averaged), against the seed-to-seed spread of the Gaussian runs."""
    lines = []
    for ref in ("gaussian", "gaussian-tight"):
        gaps = []
        for mech in ("ddg", "skellam"):
            for p in {(q["bits"], q["target"]) for q in points if q["mechanism"] == mech and q["bits"] >= 16}:
                d = _mean(points, mechanism=mech, bits=p[0], target=p[1]) - _mean(points, mechanism=ref, target=p[1])
                if not math.isnan(d):
                    gaps.append(d)
        spread = [np.std([q["accuracy"] for q in points if q["mechanism"] == ref and q["target"] == t])
                  for t in {q["target"] for q in points if q["mechanism"] == ref}]  # fmt: skip
        lines.append(
            f"accuracy(DDG or Skellam, >= 16 bits) - accuracy({ref}) at the same epsilon: mean {np.mean(gaps):+.3f}, "
            f"range [{min(gaps):+.3f}, {max(gaps):+.3f}] over {len(gaps)} points (seed std of {ref}: "
            f"{np.mean(spread):.3f})"
        )
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = doc["points"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    top = _mean(pts, mechanism="non-private")
    styles = {
        "gaussian": ("k", "o", "-"),
        "gaussian-tight": ("0.5", "x", "-."),
        "ddg": ("C0", "s", "--"),
        "skellam": ("C1", "^", ":"),
    }
    labels = {
        "gaussian": "Gaussian, same bound as DDG",
        "gaussian-tight": "Gaussian, tight bound",
        "ddg": "DDG, 16 bits",
        "skellam": "Skellam, 16 bits",
    }
    for mech, (col, mk, ls) in styles.items():
        xs = doc["epsilon_targets"]
        ys = [_mean(pts, mechanism=mech, target=e, **({"bits": 16} if mech in ("ddg", "skellam") else {})) for e in xs]
        a1.plot(xs, ys, color=col, marker=mk, linestyle=ls, mfc="none", label=labels[mech])
    a1.axhline(top, color="grey", lw=1, label="non-private")
    a1.set(xscale="log", xlabel="certified ε (analyst, δ = 1e-5)", ylabel="test accuracy", title="accuracy vs ε")
    a1.set_xticks(doc["epsilon_targets"], [f"{e:g}" for e in doc["epsilon_targets"]])
    a1.set_xticks([], minor=True)
    e4 = doc["epsilon_for_bits"]
    for mech in ("ddg", "skellam"):
        col, mk, ls = styles[mech]
        ys = [_mean(pts, mechanism=mech, bits=b, target=e4) for b in doc["bits"]]
        a2.plot(doc["bits"], ys, color=col, marker=mk, linestyle=ls, mfc="none", label=mech.upper())
    a2.axhline(_mean(pts, mechanism="gaussian", target=e4), color="k", lw=1, label=labels["gaussian"])
    a2.axhline(
        _mean(pts, mechanism="gaussian-tight", target=e4), color="0.5", lw=1, ls="-.", label=labels["gaussian-tight"]
    )
    a2.axhline(top, color="grey", lw=1, label="non-private")
    a2.set(xlabel="bits per coordinate", ylabel="test accuracy", title=f"accuracy vs bits at ε = {e4:g}")
    a2.set_xticks(doc["bits"])
    a2.set_xlim(min(doc["bits"]) - 1, max(doc["bits"]) + 1)
    for b in doc["bits"]:
        if all(p.get("unreachable") for p in pts if p.get("bits") == b and p["target"] == e4):
            a2.annotate(
                f"{b} bits:\nε = {e4:g}\nunreachable",
                (b, 0.3),
                xycoords=("data", "axes fraction"),
                fontsize=8,
                ha="center",
            )
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
