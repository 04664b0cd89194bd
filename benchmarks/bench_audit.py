"""What ``secagg-dp audit`` costs per trial, against one ideal ``secagg-dp simulate`` round of the same size, and
how tight its lower bound is against the certificate.

Every case runs the real command line in a fresh process (``secagg-dp audit ... --json --no-plots``) and reads
the CPU seconds of that process (``RUSAGE_CHILDREN``). Per-trial cost: (CPU(N trials) - CPU(100 trials)) over
the 2 (N - 100) extra trial-rounds, so start-up and the certificate are not counted. Baseline, measured in the
same run: ``secagg-dp simulate mode=ideal rounds=R`` for R = 41 and R = 1, (CPU(41) - CPU(1)) / 40 per round (the
same config, same size). Printed: epsilon_lower, epsilon_certified and their ratio per observer, the CPU of the
audit, and the per-trial / per-round ratio (the target is <= 2).

    python benchmarks/bench_audit.py                  # the default single round at p = 1: 2e4 and 2e5 trials
    python benchmarks/bench_audit.py --cases          # + p < 1, dropouts, T = 5, add-then-remove (2e4 trials)
    python benchmarks/bench_audit.py --trials 20000   # choose the trial counts
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-W", "ignore", "-c", "import sys; from simulations.cli import main; sys.exit(main())"]

#: The default scenario's single round at p = 1 (DDG, 20 bits, n = 60, d = 256, z = 4), with and without its
#: default dropouts (p' = 0.05 per stage)
P1 = ["population.checkin=1.0", "rounds=1"]
CASES = {
    "p=1, no dropout": [*P1, "population.dropout=0"],
    "p=1, no dropout, T=5": ["population.checkin=1.0", "population.dropout=0", "rounds=5"],
    "p=1, dropout 0.05 (default)": P1,
    "p=0.5, dropout 0.05": ["rounds=1"],
    "p=0.5, T=5 (the default scenario)": [],
    "add-then-remove, p=1, dropout 0.05": [
        *P1,
        'privacy.mechanism="skellam"',
        'privacy.noise_enforcement="add-then-remove"',
    ],
}


def _run(args: list[str]) -> tuple[float, dict]:
    """CPU seconds of one CLI process and its JSON output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(res.stdout)


def audit(overrides: list[str], trials: int, out: Path, seed: int = 1) -> tuple[float, dict]:
    args = ["audit", "--json", "--no-plots", "--no-progress", "--trials", str(trials), "--seed", str(seed)]
    return _run([*args, "--out", str(out), "mode=ideal", *overrides])


def simulate_round_cpu(overrides: list[str], out: Path) -> float:
    """CPU of one ideal simulate round of this config: (CPU(41 rounds) - CPU(1 round)) / 40."""
    base = ["simulate", "--json", "--no-plots", "--no-progress", "--out", str(out), "mode=ideal", *overrides]
    long_cpu, _ = _run([*base, "rounds=41"])
    short_cpu, _ = _run([*base, "rounds=1"])
    return (long_cpu - short_cpu) / 40


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, nargs="*", default=[20_000, 200_000], help="trials per side")
    ap.add_argument("--cases", action="store_true", help="also p < 1, dropouts, T = 5, add-then-remove")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        target = CASES["p=1, no dropout"]
        per_round = simulate_round_cpu([o for o in target if not o.startswith("rounds=")], out / "sim")
        floor_cpu, _ = audit(target, 100, out / "a0")
        print(f"baseline: one ideal simulate round (n = 60, d = 256) {per_round * 1e3:.2f} ms CPU")
        for n in args.trials:
            cpu, doc = audit(target, n, out / "a1")
            per_trial = (cpu - floor_cpu) / (2 * (n - 100))
            a = doc["audit"]
            figures = "  ".join(
                f"{o}: {a[o]['epsilon_lower']:.3f} / {a[o]['epsilon_certified']:.3f} = "
                f"{a[o]['epsilon_lower'] / a[o]['epsilon_certified']:.2f}"
                for o in a["observers"]
            )
            print(
                f"p=1, no dropout, {n} trials/side: {figures}   CPU {cpu:.1f} s, per trial {per_trial * 1e3:.3f} ms "
                f"= {per_trial / per_round:.3f} x one simulate round"
            )
        if args.cases:
            for name, overrides in CASES.items():
                cpu, doc = audit(overrides, 20_000, out / "a2")
                a = doc["audit"]
                figures = "  ".join(
                    f"{o}: {a[o]['epsilon_lower']:.3f} / {a[o]['epsilon_certified']:.3f} = "
                    f"{a[o]['epsilon_lower'] / a[o]['epsilon_certified']:.2f}"
                    for o in a["observers"]
                )
                print(f"{name}, 20000 trials/side: {figures}   CPU {cpu:.1f} s")


if __name__ == "__main__":
    main()
