"""Cost of a durable, concurrency-safe spend: file-backed ledger vs the in-memory ledger, same run.

Each spend of the file-backed ledger takes SQLite's write lock, re-reads rows other writers committed,
checks the budget and commits with synchronous=FULL (a rollback journal), so its cost is dominated by the
disk flush; the in-memory ledger does the same RDP and budget arithmetic without a file. Also times
re-opening (and fully validating) a ledger of N events. Ratio = file / memory (> 1: the file costs more).
Usage: python benchmarks/bench_ledger.py [--spends N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from secagg_dp.accounting import Gaussian, PrivacyLedger

EVENT = Gaussian(20.0, 1.0, "add-remove")


def _spend_ms(ledger: PrivacyLedger, n: int) -> float:
    ledger.spend(EVENT)  # warm-up
    t = time.perf_counter()
    for _ in range(n):
        ledger.spend(EVENT)
    return (time.perf_counter() - t) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spends", type=int, default=200)
    args = ap.parse_args()
    memory = _spend_ms(PrivacyLedger("add-remove", epsilon_budget=1e9, delta=1e-5), args.spends)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ledger.sqlite"
        with PrivacyLedger("add-remove", path=path, epsilon_budget=1e9, delta=1e-5) as led:
            on_file = _spend_ms(led, args.spends)
        t = time.perf_counter()
        PrivacyLedger("add-remove", path=path).close()
        reopen = (time.perf_counter() - t) * 1e3
    print(f"spend, in memory : {memory:8.3f} ms")
    print(f"spend, on file   : {on_file:8.3f} ms   ratio file/memory {on_file / memory:7.1f}")
    print(f"re-open + validate {args.spends + 1} events: {reopen:.1f} ms")


if __name__ == "__main__":
    main()
