"""Run the README's ``secagg-dp`` examples on two trees and compare their outputs byte for byte.

Used to show that a refactoring changed no command output::

    python tests/tools/compare_cli_outputs.py --base HEAD~1     # base commit against the working tree

The base commit is checked out into a temporary git worktree and run from there with ``PYTHONPATH``
pointing at it, so both sides run in the same interpreter and environment. Exit status 1 and a diff on
any difference. Commands that draw fresh randomness (an unseeded ``simulate``) are not listed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from record_cli_golden import GRID  # noqa: E402  (the sibling tool's grid; one list for both)

# The README's examples (quick tour and reference sections) plus every --help page.
COMMANDS: tuple[str, ...] = (
    "--help",
    "account --help",
    "calibrate --help",
    "simulate --help",
    "verify --help",
    "account checkin --help",
    "account shuffle-gaussian --help",
    "account shuffled-checkin --help",
    "account ldp-shuffle --help",
    "account gaussian --help",
    "account ddg --help",
    "calibrate gaussian --help",
    "calibrate ddg --help",
    "verify --seed 0 --trials 1 --json",
    "account checkin --n 600000 --gamma 1e-3 --sigma 1 --mechanism gaussian --rounds 10 --delta 1e-8",
    "account checkin --n 600000 --gamma 1e-3 --sigma 1 --mechanism gaussian --rounds 10 --delta 1e-8 --json --rdp",
    "account checkin --n 10 --gamma 1 --sigma 1 --local-steps 2 --sample-rate 1 --rounds 1 --delta 1e-5 --json",
    "account checkin --n 1000 --p 0.5 --dropout 0.1 --sigma 2 --rounds 10 --delta 1e-6 --json",
    "account ddg --clients 100 --dim 65536 --bits 16 --clip 1 --noise-multiplier 1 --rounds 1 --delta 1e-5 "
    "--neighbouring add-remove --json",
    "account skellam --clients 100 --dim 65536 --bits 16 --clip 1 --noise-multiplier 1 --rounds 1 --delta 1e-5 "
    "--neighbouring add-remove --json",
    "account gaussian --noise-multiplier 1 --rounds 10 --delta 1e-5 --json",
    "calibrate gaussian --epsilon 2 --rounds 100 --sample-rate 0.01 --sampling poisson --neighbouring add-remove "
    "--delta 1e-5",
    "account shuffle-gaussian --n 60000 --sigma 9.48 --max-order 30 --rounds 1 --delta 1.6667e-5 --json",
    "account shuffled-checkin --n 10000 --gamma 0.1 --sigma 1 --rounds 10 --delta 1e-5 --json",
    "simulate --json --out {tmp}/sim seed=3 rounds=2 population.clients=20",
    # the golden grid of tests/simulations/test_cli_golden.py: account checkin (rdp / window / pld, observers,
    # coalition, JSON, --rdp, local steps, dropout, errors), calibrate checkin, the shuffle commands, account
    # gaussian / ddg / skellam
    *GRID,
)


def run_all(tree: Path, tmp: Path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    outputs = []
    for i, cmd in enumerate(COMMANDS):
        argv = cmd.format(tmp=tmp / f"c{i}").split()
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from simulations.cli import main; sys.exit(main())", *argv],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        text = proc.stdout + proc.stderr
        outputs.append(f"$ secagg-dp {cmd}\n[exit {proc.returncode}]\n{_scrub(text, tmp)}")
    return outputs


def _scrub(text: str, tmp: Path) -> str:
    """Drop what legitimately differs between two runs: temp paths and wall-clock timings."""
    text = text.replace(str(tmp), "<tmp>")
    try:
        doc = json.loads(text)
    except ValueError:
        pass
    else:
        return json.dumps(_drop_timings(doc), indent=1, sort_keys=True)
    text = re.sub(r'"(elapsed|seconds|wall|time)[a-z_]*": [0-9.e+-]+', r'"\1": <t>', text)
    return re.sub(r"\b\d+\.\d+ ?s\b", "<t>s", text)


def _drop_timings(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: _drop_timings(v) for k, v in doc.items() if k not in TIMING_KEYS}
    if isinstance(doc, list):
        return [_drop_timings(v) for v in doc]
    return doc


TIMING_KEYS = {"seconds", "elapsed", "elapsed_s", "wall_seconds", "time"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare the working tree against")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        base_tree = Path(d) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), args.base],
            check=True,
            capture_output=True,
        )
        try:
            (Path(d) / "a").mkdir()
            (Path(d) / "b").mkdir()
            before = run_all(base_tree, Path(d) / "a")
            after = run_all(ROOT, Path(d) / "b")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], check=False)
    bad = 0
    for b, a in zip(before, after, strict=True):  # each side's temp folder is already "<tmp>" (run_all scrubs it)
        if a != b:
            bad += 1
            sys.stdout.writelines(difflib.unified_diff(b.splitlines(True), a.splitlines(True), "base", "tree"))
    print(f"{len(COMMANDS) - bad} identical, {bad} different (base {args.base})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
