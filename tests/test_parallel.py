"""secagg_dp._parallel.idle_cpus: worker threads follow the CPUs other runnable tasks leave idle."""

from __future__ import annotations

import os

import pytest

import secagg_dp._parallel as par


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@pytest.mark.parametrize("busy,limit", [(0.0, 4), (0.0, 1), (0.4, 8), (1.6, 8), (1e3, 8)])
def test_idle_cpus_is_cpus_minus_rounded_busy_within_one_and_limit(monkeypatch, busy, limit):
    monkeypatch.setattr(par, "_busy_cpus", lambda: busy)
    want = max(1, min(limit, _cpus() - int(busy + 0.5)))  # busy rounded half up; never below one
    assert par.idle_cpus(limit) == want


def test_busy_count_excludes_the_caller_and_falls_back_to_the_load_average(monkeypatch):
    assert par._busy_cpus() >= 0.0

    def no_file(*args: object, **kwargs: object) -> None:
        raise OSError("no /proc/loadavg")

    monkeypatch.setattr(par, "open", no_file, raising=False)
    monkeypatch.setattr(par.os, "getloadavg", lambda: (1.25, 0.0, 0.0))
    assert par._busy_cpus() == 1.25

    def no_load() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(par.os, "getloadavg", no_load)
    assert par._busy_cpus() == 0.0
    assert par.idle_cpus(64) == min(64, _cpus())
