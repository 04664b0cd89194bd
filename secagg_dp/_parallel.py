"""How many worker threads a computation may use: one per idle CPU.

Used where independent numpy work is split over threads and recombined in a fixed order (so the numbers do not
depend on the count). On a machine whose CPUs are all busy a second thread only adds switching and cache
traffic (measured: about 20 % more CPU time for the check-in PLD tails at a load average of 2.5 on 2 cores), so
the count follows the CPUs that other runnable tasks leave idle.
"""

from __future__ import annotations

import math
import os

__all__ = ["idle_cpus"]


def _busy_cpus() -> float:
    """Runnable tasks besides the caller, now (Linux: the running count in /proc/loadavg, which includes this
    process's own busy threads, so nested splitting does not oversubscribe); elsewhere the 1-minute load
    average; 0 if neither is available. The 1-minute average is not used on Linux: a run of queries raises it
    by itself within a minute and would switch the threads off on an otherwise idle machine."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            running = f.read().split()[3].split("/")[0]
        return max(0.0, float(running) - 1.0)
    except (OSError, IndexError, ValueError):
        pass
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows, or no load average
        return 0.0


def idle_cpus(limit: int) -> int:
    """CPUs this process may use (its affinity mask) minus those other runnable tasks keep busy
    (:func:`_busy_cpus`, rounded), at least 1 and at most ``limit``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(limit, cpus - math.floor(_busy_cpus() + 0.5)))
