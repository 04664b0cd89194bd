"""Record the outputs of the CLI golden grid into ``tests/simulations/data/cli_golden.json``.

Run on the commit whose outputs are the reference (before a refactoring), from the repository root::

    python tests/tools/record_cli_golden.py

Each command runs in-process (``simulations.cli.main``) exactly as ``tests/simulations/test_cli_golden.py``
re-runs it; stdout, stderr and the exit status are stored verbatim (floats as the commands print them).
Commands that took over a second here are flagged ``slow`` (the test marks them ``@pytest.mark.slow``).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "simulations" / "data" / "cli_golden.json"

_C = "account checkin --n 1000 --gamma 0.1 --sigma 2 --rounds 5 --delta 1e-6"
_SC = "account shuffled-checkin --n 1000 --gamma 0.1 --rounds 3 --delta 1e-5 --max-order 32"
_SG = "account shuffle-gaussian --n 1000 --sigma 2 --max-order 32 --rounds 3 --delta 1e-5"

#: The grid: account checkin (pld / rdp / window, both observers, the coalition, JSON, --rdp, local steps,
#: dropout, discrete mechanisms, errors), calibrate checkin (each observer), the shuffle commands (each
#: method, --json) and account gaussian / ddg / skellam. Small n and orders, so the whole grid runs in seconds.
GRID: tuple[str, ...] = (
    _C,
    _C + " --json",
    _C + " --method rdp",
    _C + " --method window --json",
    _C + " --method rdp --json --rdp",
    _C + " --method window --json --rdp",
    _C + " --observer server --json",
    _C + " --observer server --method rdp --json",
    _C + " --observer server --method window --json",
    _C + " --colluders 2 --min-sum 10",
    _C + " --colluders 2 --min-sum 10 --json",
    _C + " --colluders 1 --min-sum 5 --method rdp --json",
    _C + " --colluders 0 --min-sum 1 --method window",
    _C + " --baselines",
    _C + " --baselines --json",
    _C + " --amplification thm9 --method rdp",
    _C + " --amplification thm27 --method rdp --json",
    _C + " --window-delta coupling --method window --json",
    _C + " --colluders 2",
    _C + " --min-sum 2",
    _C + " --colluders 2 --min-sum 2000",
    _C + " --method pld --rdp",
    _C + " --sample-rate 0.5",
    "account checkin --n 200 --p 0.5 --dropout 0.1 --dropout-stages 1 --sigma 2 --rounds 3 --delta 1e-6",
    "account checkin --n 200 --p 0.5 --dropout 0.1 --sigma 2 --rounds 3 --delta 1e-6 --json",
    "account checkin --n 200 --gamma 0.5 --dropout 0.1 --sigma 2 --rounds 3 --delta 1e-6",
    "account checkin --n 200 --p 0.5 --sigma 2 --rounds 3 --delta 1e-6",
    "account checkin --n 200 --gamma 0.2 --sigma 1 --mechanism ddg --rounds 3 --delta 1e-6 --max-order 64",
    "account checkin --n 200 --gamma 0.2 --sigma 1 --mechanism ddg --rounds 3 --delta 1e-6 --method pld",
    "account checkin --n 200 --gamma 0.2 --sigma 1 --mechanism skellam --rounds 3 --delta 1e-6 --max-order 64 --json",
    "account checkin --n 200 --gamma 0.2 --sigma 1 --mechanism skellam --rounds 3 --delta 1e-6 --max-order 64 "
    "--observer server --colluders 1 --min-sum 3 --json",
    "account checkin --n 50 --gamma 0.5 --sigma 1 --local-steps 2 --sample-rate 0.5 --rounds 2 --delta 1e-5 "
    "--max-order 64",
    "account checkin --n 50 --gamma 0.5 --sigma 1 --local-steps 1 --rounds 2 --delta 1e-5 --max-order 64 --json",
    "account checkin --n 50 --gamma 0.5 --sigma 1 --local-steps 2 --rounds 2 --delta 1e-5 --max-order 64 --json",
    "account checkin --n 50 --gamma 0.5 --sigma 1 --local-steps 2 --rounds 2 --delta 1e-5 --max-order 64 "
    "--mechanism ddg --json",
    "account checkin --n 100 --gamma 0.1 --sigma 0.3 --rounds 2 --delta 1e-6 --max-order 16",
    "account checkin --n 100 --gamma 0.1 --sigma 0.3 --rounds 2 --delta 1e-6 --max-order 16 --json",
    "account checkin --n 100 --gamma 0.1 --sigma 2 --rounds 2 --delta 1e-6 --colluders 3 --min-sum 2",
    "account checkin --n 1 --gamma 0.5 --sigma 1 --rounds 1 --delta 1e-5 --method rdp",
    "account checkin --n 1 --gamma 0.5 --sigma 1 --rounds 2 --delta 1e-5 --json",
    "account checkin --n 10 --gamma 1 --sigma 1 --local-steps 2 --sample-rate 1 --rounds 1 --delta 1e-5 --json",
    "account checkin --n 10 --gamma 1 --sigma 1 --rounds 1 --delta 1e-5",
    "calibrate checkin --n 1000 --gamma 0.1 --rounds 5 --delta 1e-6 --epsilon 2",
    "calibrate checkin --n 1000 --gamma 0.1 --rounds 5 --delta 1e-6 --epsilon 2 --observer server --json",
    "calibrate checkin --n 1000 --gamma 0.1 --rounds 5 --delta 1e-6 --epsilon 4 --observer coalition "
    "--colluders 2 --min-sum 10",
    "calibrate checkin --n 1000 --gamma 0.1 --rounds 5 --delta 1e-6 --epsilon 4 --observer coalition",
    _SG,
    _SG + " --json",
    _SG + " --bound upper --json --rdp",
    _SG + " --conversion mironov --json",
    _SC + " --sigma 2",
    _SC + " --sigma 2 --json --rdp",
    _SC + " --sigma 2 --method chernoff --json",
    _SC + " --sigma 2 --method pair-lower --json",
    _SC + " --sigma 2 --method gaussian-upper --json --rdp",
    _SC + " --sigma 2 --method approach1",
    _SC + " --eps0 1",
    _SC + " --eps0 1 --json",
    _SC + " --eps0 1 --delta0 1e-7 --method approach2 --json",
    _SC + " --eps0 1 --method first-cut --json",
    _SC + " --eps0 1 --method seed000-upper --json --rdp",
    _SC + " --eps0 1 --method seed000-lower",
    _SC + " --eps0 1 --delta0 1e-7 --method seed000-lower",
    _SC + " --eps0 1 --sigma 2",
    "account gaussian --noise-multiplier 1 --rounds 10 --delta 1e-5",
    "account gaussian --noise-multiplier 1 --rounds 10 --delta 1e-5 --json",
    "account ddg --clients 100 --dim 1024 --bits 16 --clip 1 --noise-multiplier 1 --rounds 1 --delta 1e-5 "
    "--neighbouring add-remove --json",
    "account skellam --clients 100 --dim 1024 --bits 16 --clip 1 --noise-multiplier 1 --rounds 1 --delta 1e-5 "
    "--neighbouring add-remove",
)


def run(cmd: str) -> tuple[int, str, str, float]:
    """(exit status, stdout, stderr, seconds) of one command run in-process."""
    from simulations.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(cmd.split())
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - start


def main() -> int:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    records = []
    for cmd in GRID:
        code, out, err, seconds = run(cmd)
        records.append({"argv": cmd, "exit": code, "stdout": out, "stderr": err, "slow": seconds > 1.0})
    doc = {
        "note": f"recorded on commit {sha.stdout.strip()} before the refactor (tests/tools/record_cli_golden.py)",
        "commands": records,
    }
    FIXTURE.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"{len(records)} commands recorded in {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
