"""Benchmark: the commands a user waits on, run as subprocesses (the ``secagg-dp`` console script's own code).

Times ``secagg-dp --help``, the README's ``account checkin`` query, the issue's ``account checkin`` query
(n = 10^4, gamma = 0.1) and ``calibrate checkin`` at n = 10^6, T = 1000, each the best of ``--repeat`` runs,
wall clock and CPU (user + system of the child). Baselines measured in the same run: ``python -c pass``
(the interpreter's floor) and, with ``--baseline-rev REV``, the same commands on the package as of git
revision REV (extracted to a temporary folder), whose outputs must equal today's for the account queries.
Both trees are byte-compiled first (``compileall``; ``--no-compile`` skips it), as an installed package is:
otherwise, under ``PYTHONDONTWRITEBYTECODE``, every run recompiles the package's modules (0.1-0.2 s here).

    python benchmarks/bench_query.py                      # today's code against `python -c pass`
    python benchmarks/bench_query.py --baseline-rev main  # ... and against main (calibrate timed there only
                                                          # with --baseline-calibrate: a minute before b815460)
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "import sys; from simulations.cli import main; sys.exit(main())"  # the console script's body
COMMANDS = {
    "--help": ["--help"],
    "account checkin (README)": "account checkin --n 600000 --gamma 1e-3 --sigma 1 --mechanism gaussian "
    "--rounds 10 --delta 1e-8".split(),
    "account checkin (n=1e4, gamma=0.1)": "account checkin --n 10000 --gamma 0.1 --sigma 1 --rounds 10 "
    "--delta 1e-5".split(),
    "calibrate checkin (n=1e6, T=1000)": "calibrate checkin --epsilon 1 --n 1000000 --gamma 1e-3 --rounds 1000 "
    "--delta 1e-8".split(),
}
TARGETS = {
    "--help": "<= 5x python -c pass",
    "account checkin (README)": "<= 0.5 s",
    "calibrate checkin (n=1e6, T=1000)": "<= 3 s",
}


def run(argv: list[str], path: Path) -> tuple[float, float, str]:
    """(wall s, child CPU s, stdout) of one run with ``path`` first on PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=str(path))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=path).stdout
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out


def best(argv: list[str], path: Path, repeat: int) -> tuple[float, float, str]:
    runs = [run(argv, path) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[0][2]


def extract(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (git archive) under ``into``."""
    archive = into / "tree.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "archive", rev], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def byte_compile(path: Path) -> None:
    """Write the bytecode of the tree's packages (pip does this on install; an editable tree caches it on
    first import unless PYTHONDONTWRITEBYTECODE is set)."""
    dirs = [str(path / d) for d in ("secagg_dp", "protocols", "simulations") if (path / d).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="runs per command, best kept (calibrate: 1)")
    p.add_argument("--baseline-rev", default=None, help="also time the package at this git revision")
    p.add_argument("--baseline-calibrate", action="store_true", help="time calibrate at the baseline too")
    p.add_argument("--no-compile", action="store_true", help="do not byte-compile the trees first")
    args = p.parse_args()
    floor = best([sys.executable, "-c", "pass"], ROOT, args.repeat)
    print(f"python -c pass: {floor[0]:.3f} s wall, {floor[1]:.3f} s CPU (floor, same run)")
    with tempfile.TemporaryDirectory() as tmp:
        base = extract(args.baseline_rev, Path(tmp)) if args.baseline_rev else None
        if not args.no_compile:
            for tree in (ROOT, base):
                if tree is not None:
                    byte_compile(tree)
        head = f"{'command':<36}{'wall s':>8}{'CPU s':>8}{'x floor':>9}"
        if base is not None:
            head += f"{'base wall':>11}{'base CPU':>10}{'wall gain':>11}{'CPU gain':>10}  output"
        print(head)
        for name, argv in COMMANDS.items():
            slow = name.startswith("calibrate")
            reps = 1 if slow else args.repeat
            wall, cpu, out = best([sys.executable, "-c", ENTRY, *argv], ROOT, reps)
            line = f"{name:<36}{wall:>8.2f}{cpu:>8.2f}{wall / floor[0]:>8.1f}x"
            if base is not None and (not slow or args.baseline_calibrate):
                b_wall, b_cpu, b_out = best([sys.executable, "-c", ENTRY, *argv], base, reps)
                same = "same" if b_out == out else ("differs" if not slow else "see below")
                line += f"{b_wall:>11.2f}{b_cpu:>10.2f}{b_wall / wall:>10.2f}x{b_cpu / cpu:>9.2f}x  {same}"
                if slow and b_out != out:
                    line += "\n    baseline: " + " | ".join(b_out.strip().splitlines()[1:]).strip()
            if name in TARGETS:
                line += f"  (target {TARGETS[name]})"
            print(line, flush=True)
            if slow:
                print("    today:    " + " | ".join(out.strip().splitlines()[1:]).strip())


if __name__ == "__main__":
    main()
