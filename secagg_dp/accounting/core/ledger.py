"""RDP accountant (dp-accounting style contract) and a persistent privacy ledger with a budget filter.

The accountant is pure state: a neighbouring relation, the orders, the composed RDP curve. The ledger adds
SQLite persistence (one transaction per event, committed *before* the caller releases anything) and a
filter that refuses an event exceeding (ε_max, δ) without touching any state.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

import numpy as np

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.conversion import dp_delta, rdp_to_dp
from secagg_dp.accounting.core.events import (
    Composed,
    DiscreteGaussian,
    DistributedDiscreteGaussian,
    Gaussian,
    PoissonSampled,
    PrivacyEvent,
    SampledWithoutReplacement,
    SelfComposed,
    Skellam,
    check_neighbouring,
)
from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS, check_orders
from secagg_dp.errors import ParameterError, PrivacyBudgetExceeded

__all__ = [
    "UnsupportedEventError",
    "register_event_type",
    "RdpAccountant",
    "PrivacyLedger",
]

_SUPPORTED: set[type] = {
    Gaussian,
    DiscreteGaussian,
    DistributedDiscreteGaussian,
    Skellam,
    PoissonSampled,
    SampledWithoutReplacement,
    Composed,
    SelfComposed,
}


class UnsupportedEventError(ParameterError):
    """The accountant cannot process an event; the message names the offending sub-event."""


def register_event_type(cls: type) -> type:
    """Register a :class:`PrivacyEvent` subclass (with ``rdp``, ``neighbouring``, ``children``); a decorator."""
    if not (isinstance(cls, type) and issubclass(cls, PrivacyEvent)):
        raise TypeError(f"Argument 'cls' must be a PrivacyEvent subclass, not {cls!r}.")
    _SUPPORTED.add(cls)
    return cls


def _first_unsupported(event: Any, neighbouring: str) -> tuple[Any, str] | None:
    if not isinstance(event, PrivacyEvent) or type(event) not in _SUPPORTED:
        return event, "its type is not registered with the accountant"
    if event.neighbouring != neighbouring:
        return event, f"it is '{event.neighbouring}' but the accountant is '{neighbouring}'"
    for child in event.children():
        bad = _first_unsupported(child, child.neighbouring)
        if bad is not None:
            return bad
    return None


class RdpAccountant:
    """Composes events into an RDP curve. Contract as dp-accounting's ``PrivacyAccountant``.

    ``supports(event)``; ``compose(event, count=1)`` returns ``self`` (chains) and raises
    :class:`UnsupportedEventError` naming the unsupported sub-event before changing anything;
    ``get_epsilon(delta)``, ``get_epsilon_and_order(delta)``, ``get_delta(epsilon)``.
    """

    def __init__(self, neighbouring: str = "add-remove", orders: Any = DEFAULT_ORDERS) -> None:
        self._neighbouring = check_neighbouring(neighbouring)
        self._orders = check_orders(orders).copy()
        self._orders.setflags(write=False)
        self._rdp = np.zeros_like(self._orders)

    @property
    def neighbouring(self) -> str:
        return self._neighbouring

    @property
    def orders(self) -> np.ndarray:
        return self._orders

    @property
    def rdp(self) -> np.ndarray:
        """Composed RDP curve (a copy)."""
        return self._rdp.copy()

    def supports(self, event: Any) -> bool:
        return _first_unsupported(event, self._neighbouring) is None

    def event_rdp(self, event: PrivacyEvent, count: int = 1) -> np.ndarray:
        """RDP of ``count`` repetitions of ``event`` at this accountant's orders (no state change)."""
        bad = _first_unsupported(event, self._neighbouring)
        if bad is not None:
            raise UnsupportedEventError(
                f"Unsupported event {type(bad[0]).__name__}: {bad[1]}. Offending sub-event: {bad[0]!r}."
            )
        c = check_int("count", count, lo=0)
        r = np.asarray(event.rdp(self._orders), dtype=np.float64)
        if r.shape != self._orders.shape or np.any(np.isnan(r)) or np.any(r < 0):
            raise ParameterError(f"Event {type(event).__name__} returned an invalid RDP curve.")
        return c * r if c else np.zeros_like(r)

    def compose(self, event: PrivacyEvent, count: int = 1) -> RdpAccountant:
        self._rdp = self._rdp + self.event_rdp(event, count)
        return self

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float]:
        return rdp_to_dp(self._orders, self._rdp, delta)

    def get_epsilon(self, delta: float) -> float:
        return self.get_epsilon_and_order(delta)[0]

    def get_delta(self, epsilon: float) -> float:
        return dp_delta(self._orders, self._rdp, epsilon)[0]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event TEXT NOT NULL,
    count INTEGER NOT NULL,
    rdp TEXT NOT NULL
);
"""


class PrivacyLedger:
    """Ledger of spent events with optional SQLite persistence and an (ε_max, δ) budget filter.

    ``spend(event, count)`` validates, checks the budget on the would-be total, commits one SQLite
    transaction (event description, count, its RDP curve), and only then updates memory; call it *before*
    releasing the output, so a crash can only over-count. ``PrivacyLedger(path=...)`` on an existing file
    resumes from the committed rows (orders and neighbouring must match). A refused event raises
    :class:`PrivacyBudgetExceeded` and leaves memory and file exactly as they were.
    """

    def __init__(
        self,
        neighbouring: str = "add-remove",
        orders: Any = DEFAULT_ORDERS,
        *,
        path: str | os.PathLike[str] | None = None,
        epsilon_budget: float | None = None,
        delta: float | None = None,
    ) -> None:
        self._acc = RdpAccountant(neighbouring, orders)
        if (epsilon_budget is None) != (delta is None):
            raise ParameterError("Arguments 'epsilon_budget' and 'delta' must be given together, or neither.")
        self._eps_max = None if epsilon_budget is None else check_real("epsilon_budget", epsilon_budget, lo=0.0)
        self._delta = None if delta is None else check_real("delta", delta, lo=0.0, hi=1.0, hi_open=True)
        self._entries: list[tuple[dict[str, Any], int]] = []
        self._conn: sqlite3.Connection | None = None
        if path is not None:
            self._open(os.fspath(path))

    # -- persistence -------------------------------------------------------------------------------
    def _open(self, path: str) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(_SCHEMA)
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        orders_json = json.dumps([float(x) for x in self._acc.orders])
        if not meta:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO meta VALUES ('neighbouring', ?)", (self._acc.neighbouring,))
            conn.execute("INSERT INTO meta VALUES ('orders', ?)", (orders_json,))
            conn.execute("COMMIT")
        else:
            if meta.get("neighbouring") != self._acc.neighbouring or meta.get("orders") != orders_json:
                conn.close()
                raise ParameterError(
                    f"Ledger file {path!r} was created with neighbouring={meta.get('neighbouring')!r} and other "
                    "orders; open it with the same neighbouring relation and orders."
                )
            total = np.zeros_like(self._acc.orders)
            for ev_json, count, rdp_json in conn.execute("SELECT event, count, rdp FROM events ORDER BY seq"):
                total = total + np.asarray(json.loads(rdp_json), dtype=np.float64)
                self._entries.append((json.loads(ev_json), int(count)))
            self._acc._rdp = total
        self._conn = conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> PrivacyLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries -----------------------------------------------------------------------------------
    @property
    def neighbouring(self) -> str:
        return self._acc.neighbouring

    @property
    def orders(self) -> np.ndarray:
        return self._acc.orders

    @property
    def rdp(self) -> np.ndarray:
        return self._acc.rdp

    @property
    def entries(self) -> list[tuple[dict[str, Any], int]]:
        """(event description, count) for every spent event, oldest first (a copy)."""
        return list(self._entries)

    def epsilon(self, delta: float | None = None) -> tuple[float, float]:
        """(ε, order) of everything spent, at ``delta`` (default: the budget's δ)."""
        d = self._delta if delta is None else delta
        if d is None:
            raise ParameterError("Argument 'delta' is required when the ledger has no budget.")
        return rdp_to_dp(self._acc.orders, self._acc.rdp, d, warn=False)

    def supports(self, event: Any) -> bool:
        return self._acc.supports(event)

    def would_exceed(self, event: PrivacyEvent, count: int = 1) -> bool:
        """True if spending ``event`` would exceed the budget (False when there is no budget)."""
        if self._eps_max is None:
            return False
        new = self._acc.rdp + self._acc.event_rdp(event, count)
        eps, _ = rdp_to_dp(self._acc.orders, new, self._delta, warn=False)
        return not eps <= self._eps_max

    # -- spending ----------------------------------------------------------------------------------
    def spend(self, event: PrivacyEvent, count: int = 1) -> PrivacyLedger:
        """Record ``count`` repetitions of ``event`` or raise without changing anything."""
        add = self._acc.event_rdp(event, count)
        new = self._acc.rdp + add
        if self._eps_max is not None:
            eps, order = rdp_to_dp(self._acc.orders, new, self._delta, warn=False)
            if not eps <= self._eps_max:
                raise PrivacyBudgetExceeded(
                    f"Event {type(event).__name__} (count {count}) refused: total epsilon would be {eps:.6g} "
                    f"(order {order:g}) > budget {self._eps_max:g} at delta={self._delta:g}. Ledger unchanged."
                )
        desc = event.describe()
        if self._conn is not None:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT INTO events (event, count, rdp) VALUES (?, ?, ?)",
                    (json.dumps(desc), int(count), json.dumps([float(x) for x in add])),
                )
                conn.execute("COMMIT")
            except sqlite3.Error:
                conn.execute("ROLLBACK")
                raise
        self._acc._rdp = new
        self._entries.append((desc, int(count)))
        return self

