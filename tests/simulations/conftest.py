"""Shared helpers for the simulator tests."""

from __future__ import annotations

import pytest

from simulations.config import build_config


class CountingAccountant:
    """A stand-in accountant for tests about the runner's mechanics (not about privacy numbers)."""

    def __init__(self) -> None:
        self.rounds = 0

    def describe(self) -> dict:
        return {"method": "test-counter", "neighbouring": "replace-one", "delta": 1e-5, "accountant": "test"}

    def record_round(self) -> tuple[float, int]:
        self.rounds += 1
        return 0.5 * self.rounds, 2


@pytest.fixture
def counting_accountant() -> CountingAccountant:
    return CountingAccountant()


def force_forking(monkeypatch: pytest.MonkeyPatch, min_clients: int) -> list[int]:
    """Make the default client pool fork 2 workers for a small round (``min_clients`` clients per worker, 2
    usable cores); returns the list to which each forked pool appends its worker count."""
    import protocols.procpool as pp

    forks: list[int] = []
    real = pp.ProcessClientPool

    class Counting(real):
        def __init__(self, inputs, workers):
            forks.append(workers)
            super().__init__(inputs, workers)

    monkeypatch.setattr(pp, "MIN_CLIENTS_PER_WORKER", min_clients)
    monkeypatch.setattr(pp, "usable_cores", lambda: 2)
    monkeypatch.setattr(pp, "ProcessClientPool", Counting)
    return forks


def small_config(**sections):
    """A small ideal-mode scenario; the values these tests were written for are pinned here, not taken from
    default.toml (the defaults of every scenario, which may move)."""
    raw = {
        "mode": "ideal",
        "rounds": 2,
        "seed": 11,
        "population": {"clients": 16, "checkin": 0.75, "dropout": 0.0},
        "secagg": {"threshold_fraction": 0.5},
        "privacy": {"noise_multiplier": 1.0, "k_stddevs": 4.0},
        "task": {"name": "mean", "dim": 24},
    }
    if "threshold" in sections.get("secagg", {}):
        del raw["secagg"]["threshold_fraction"]
    for key, val in sections.items():
        if key == "task" and "name" in val:
            raw["task"] = dict(val)
        elif isinstance(val, dict):
            raw.setdefault(key, {}).update(val)
        else:
            raw[key] = val
    return build_config(raw)
