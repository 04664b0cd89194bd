"""How many worker threads a computation may use: one per idle CPU.

Used where independent numpy work is split over threads and recombined in a fixed order (so the numbers do not
depend on the count). On a machine whose CPUs are all busy a second thread only adds switching and cache
traffic (measured: about 20 % more CPU time for the check-in PLD tails at a load average of 2.5 on 2 cores),
so the count follows the CPUs left idle by the 1-minute load average.
"""

from __future__ import annotations

import math
import os

__all__ = ["idle_cpus"]


def idle_cpus(limit: int) -> int:
    """CPUs this process may use (its affinity mask) minus those the 1-minute load average keeps busy, at least 1
    and at most ``limit``. Where the load average is unavailable, every CPU counts as idle."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows, or no load average
        busy = 0.0
    return max(1, min(limit, cpus - math.floor(busy + 0.5)))
