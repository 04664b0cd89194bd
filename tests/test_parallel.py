"""secagg_dp._parallel.idle_cpus: worker threads follow the CPUs the load average leaves idle."""

from __future__ import annotations

import os

import pytest

import secagg_dp._parallel as par


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@pytest.mark.parametrize("load,limit", [(0.0, 4), (0.0, 1), (0.4, 8), (1.6, 8), (1e3, 8)])
def test_idle_cpus_is_cpus_minus_rounded_load_within_one_and_limit(monkeypatch, load, limit):
    monkeypatch.setattr(par.os, "getloadavg", lambda: (load, load, load))
    want = max(1, min(limit, _cpus() - int(load + 0.5)))  # load rounded half up; never below one
    assert par.idle_cpus(limit) == want


def test_without_a_load_average_every_cpu_counts_as_idle(monkeypatch):
    def missing() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(par.os, "getloadavg", missing)
    assert par.idle_cpus(64) == min(64, _cpus())
