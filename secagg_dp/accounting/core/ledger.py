"""A persistent privacy ledger with a budget filter, over the RDP accountant.

The accountant (:mod:`secagg_dp.accounting.core.rdp_accountant`, re-exported here) is pure state: a
neighbouring relation, the orders, the composed RDP curve. The ledger adds SQLite persistence
(one transaction per event, committed *before* the caller releases anything) and a filter that refuses an
event exceeding (ε_max, δ) without touching any state.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from typing import Any

import numpy as np

from secagg_dp._validate import check_real
from secagg_dp.accounting.core.conversion import rdp_to_dp
from secagg_dp.accounting.core.events import PrivacyEvent
from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS, check_orders
from secagg_dp.accounting.core.rdp_accountant import RdpAccountant, register_event_type
from secagg_dp.errors import LedgerError, ParameterError, PrivacyBudgetExceeded, UnsupportedEventError

__all__ = [
    "UnsupportedEventError",
    "register_event_type",
    "RdpAccountant",
    "PrivacyLedger",
    "LedgerError",
]

#: Value of meta 'format'; ledgers written before it existed hold only 'neighbouring' and 'orders'.
LEDGER_FORMAT = "secagg-dp-ledger/1"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event TEXT NOT NULL,
    count INTEGER NOT NULL,
    rdp TEXT NOT NULL
);
"""
_COLUMNS = {"meta": ["key", "value"], "events": ["seq", "event", "count", "rdp"]}
_BUSY_TIMEOUT_S = 60.0


class PrivacyLedger:
    """Ledger of spent events with optional SQLite persistence and an (ε_max, δ) budget filter.

    ``spend(event, count)`` validates, then in ONE SQLite write transaction (``BEGIN IMMEDIATE``) reads the
    rows other handles or processes committed since, checks the budget on the committed total plus the
    event, and inserts the event (description, count, RDP curve) — so any number of handles and processes
    sharing one file never exceed the budget together; memory is updated only after the commit. Call it
    *before* releasing the output, so a crash can only over-count.

    ``PrivacyLedger(path=...)`` creates the file if the path does not exist; an existing file is validated
    before use (SQLite header and integrity, tables and columns, meta rows, orders and neighbouring, every
    event row: JSON, count >= 0, RDP of the right length with no NaN or negative value, sequence numbers
    1..N matching the event counter) and refused with :class:`LedgerError` if anything is off. The file
    uses a rollback journal, so after every commit the main file alone holds every committed event and a
    plain copy of a closed ledger is complete (docs/ledger.md). A refused event raises
    :class:`PrivacyBudgetExceeded` and writes nothing.
    """

    def __init__(
        self,
        neighbouring: str = "add-remove",
        orders: Any = None,
        *,
        path: str | os.PathLike[str] | None = None,
        epsilon_budget: float | None = None,
        delta: float | None = None,
    ) -> None:
        # orders=None: DEFAULT_ORDERS for a new ledger, the stored orders for an existing file (so ledgers
        # written with an earlier default grid keep opening); explicit orders must match the file's
        self._orders_given = orders is not None
        self._acc = RdpAccountant(neighbouring, DEFAULT_ORDERS if orders is None else orders)
        if (epsilon_budget is None) != (delta is None):
            raise ParameterError("Arguments 'epsilon_budget' and 'delta' must be given together, or neither.")
        self._eps_max = None if epsilon_budget is None else check_real("epsilon_budget", epsilon_budget, lo=0.0)
        self._delta = None if delta is None else check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
        self._entries: list[tuple[dict[str, Any], int]] = []
        self._conn: sqlite3.Connection | None = None
        self._seq = 0  # highest event seq read from the file
        self._path: str | None = None
        if path is not None:
            self._path = os.fspath(path)
            try:
                self._open(self._path)
            except sqlite3.Error as exc:
                self._abandon()
                raise LedgerError(f"Ledger file {self._path!r} cannot be used: {exc}.") from exc
            except BaseException:
                self._abandon()
                raise

    # -- persistence -------------------------------------------------------------------------------
    def _open(self, path: str) -> None:
        exists = os.path.exists(path)
        if exists:
            _check_header(path)
        conn = sqlite3.connect(path, isolation_level=None, timeout=_BUSY_TIMEOUT_S)
        self._conn = conn
        orders_json = json.dumps([float(x) for x in self._acc.orders])
        conn.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:  # a new file (another process may have created it meanwhile: then tables exist)
                if exists:
                    raise LedgerError(f"Ledger file {path!r} is an SQLite database with no tables: not a ledger.")
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [
                        ("format", LEDGER_FORMAT),
                        ("neighbouring", self._acc.neighbouring),
                        ("orders", orders_json),
                        ("events", "0"),
                    ],
                )
            else:
                self._validate(conn, path, tables, orders_json)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "delete":
            try:  # older ledgers used WAL: fold it into the main file and switch to a rollback journal
                conn.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.OperationalError:
                pass  # another process holds it open; the WAL is checkpointed on close
        conn.execute("PRAGMA synchronous=FULL")

    def _validate(self, conn: sqlite3.Connection, path: str, tables: set[str], orders_json: str) -> None:
        """Refuse anything but an intact ledger of this neighbouring relation and these orders."""
        if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise LedgerError(f"Ledger file {path!r} is damaged (SQLite quick_check failed).")
        for table, cols in _COLUMNS.items():
            if table not in tables:
                raise LedgerError(f"Ledger file {path!r} has no '{table}' table: damaged or not a ledger.")
            have = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            if have != cols:
                raise LedgerError(f"Ledger file {path!r}: table '{table}' has columns {have}, expected {cols}.")
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        for key in ("neighbouring", "orders"):
            if key not in meta:
                raise LedgerError(f"Ledger file {path!r} has no meta row '{key}': damaged.")
        legacy = "format" not in meta and "events" not in meta
        if not legacy and ("format" not in meta or "events" not in meta):
            missing = "format" if "format" not in meta else "events"
            raise LedgerError(f"Ledger file {path!r} has no meta row '{missing}': damaged.")
        if not legacy and meta["format"] != LEDGER_FORMAT:
            raise LedgerError(
                f"Ledger file {path!r} has format {meta['format']!r}; this version reads {LEDGER_FORMAT!r}."
            )
        if meta["orders"] != orders_json and not self._orders_given:
            try:
                stored = check_orders(json.loads(meta["orders"]))
            except (ValueError, TypeError) as exc:
                raise LedgerError(f"Ledger file {path!r} has unreadable orders: damaged.") from exc
            self._acc = RdpAccountant(self._acc.neighbouring, stored)
            orders_json = meta["orders"]
        if meta["neighbouring"] != self._acc.neighbouring or meta["orders"] != orders_json:
            raise ParameterError(
                f"Ledger file {path!r} was created with neighbouring={meta['neighbouring']!r} and other "
                "orders; open it with the same neighbouring relation and orders."
            )
        n_rows, max_seq = conn.execute("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM events").fetchone()
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        last = 0 if row is None else int(row[0])
        counter = n_rows if legacy else _meta_int(meta, "events", path)
        if not (n_rows == max_seq == last == counter):
            raise LedgerError(
                f"Ledger file {path!r} is damaged: {n_rows} event rows, highest sequence number {max_seq}, "
                f"{last} ever inserted, event counter {counter}; events were deleted or the file is incomplete."
            )
        if legacy:
            conn.executemany("INSERT INTO meta VALUES (?, ?)", [("format", LEDGER_FORMAT), ("events", str(n_rows))])
        self._read_new_rows(conn)

    def _read_new_rows(self, conn: sqlite3.Connection) -> None:
        """Validate and add the rows committed after ``self._seq`` (call inside a transaction)."""
        total = self._acc._rdp
        for seq, ev_json, count, rdp_json in conn.execute(
            "SELECT seq, event, count, rdp FROM events WHERE seq > ? ORDER BY seq", (self._seq,)
        ):
            desc, cnt, rdp = self._parse_row(seq, ev_json, count, rdp_json)
            total = total + rdp
            self._entries.append((desc, cnt))
            self._seq = int(seq)
        self._acc._rdp = total

    def _parse_row(self, seq: Any, ev_json: Any, count: Any, rdp_json: Any) -> tuple[dict[str, Any], int, np.ndarray]:
        where = f"Ledger file {self._path!r}, event {seq}"
        try:
            desc = json.loads(ev_json)
            values = json.loads(rdp_json)
        except (TypeError, ValueError) as exc:
            raise LedgerError(f"{where}: not valid JSON ({exc}).") from None
        if not isinstance(desc, dict):
            raise LedgerError(f"{where}: the event description is not a JSON object.")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise LedgerError(f"{where}: count must be an integer >= 0, not {count!r}.")
        if (
            not isinstance(values, list)
            or len(values) != self._acc.orders.size
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        ):
            raise LedgerError(f"{where}: the RDP row must be {self._acc.orders.size} numbers, one per order.")
        rdp = np.asarray(values, dtype=np.float64)
        if np.any(np.isnan(rdp)) or np.any(rdp < 0.0):
            raise LedgerError(f"{where}: the RDP row has a NaN or negative value; refusing to under-count.")
        return desc, count, rdp

    def _refresh(self) -> None:
        """Read rows other handles or processes committed since the last read."""
        if self._conn is not None:
            conn = self._conn
            conn.execute("BEGIN")
            try:
                self._read_new_rows(conn)
            finally:
                conn.execute("COMMIT")

    def _abandon(self) -> None:
        """Close the connection after a failed open, without touching the file."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close the file; a WAL left by an older ledger is checkpointed into the main file first."""
        if self._conn is not None:
            try:
                if self._conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._conn.close()
                self._conn = None

    def backup(self, dest: str | os.PathLike[str]) -> None:
        """Copy the ledger to ``dest`` consistently while it may be in use (SQLite online backup)."""
        if self._conn is None:
            raise LedgerError("This ledger has no file to copy (created without 'path').")
        target = sqlite3.connect(os.fspath(dest))
        try:
            self._conn.backup(target)
        finally:
            target.close()

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
        """Composed RDP of every event committed to the file (by any handle) when last read."""
        return self._acc.rdp

    @property
    def entries(self) -> list[tuple[dict[str, Any], int]]:
        """(event description, count) for every spent event, oldest first (a copy)."""
        return list(self._entries)

    def epsilon(self, delta: float | None = None) -> tuple[float, float]:
        """(ε, order) of everything committed (re-read from the file), at ``delta`` (default: the budget's δ)."""
        d = self._delta if delta is None else delta
        if d is None:
            raise ParameterError("Argument 'delta' is required when the ledger has no budget.")
        self._refresh()
        return rdp_to_dp(self._acc.orders, self._acc.rdp, d, warn=False)

    def supports(self, event: Any) -> bool:
        return self._acc.supports(event)

    def would_exceed(self, event: PrivacyEvent, count: int = 1) -> bool:
        """True if spending ``event`` now would exceed the budget (False when there is no budget)."""
        if self._eps_max is None:
            return False
        self._refresh()
        return self._exceeds(self._acc.rdp + self._acc.event_rdp(event, count))[0]

    def _exceeds(self, total: np.ndarray) -> tuple[bool, float, float]:
        if self._eps_max is None:
            return False, math.nan, math.nan
        eps, order = rdp_to_dp(self._acc.orders, total, self._delta, warn=False)
        return not eps <= self._eps_max, eps, order

    # -- spending ----------------------------------------------------------------------------------
    def spend(self, event: PrivacyEvent, count: int = 1) -> PrivacyLedger:
        """Record ``count`` repetitions of ``event`` or raise without writing anything."""
        add = self._acc.event_rdp(event, count)
        desc = event.describe()
        if self._conn is None:
            self._check_budget(event, count, self._acc.rdp + add)
            self._acc._rdp = self._acc.rdp + add
            self._entries.append((desc, int(count)))
            return self
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")  # the write lock: no other writer between the check and the insert
        try:
            self._read_new_rows(conn)
            new = self._acc.rdp + add
            self._check_budget(event, count, new)
            cur = conn.execute(
                "INSERT INTO events (event, count, rdp) VALUES (?, ?, ?)",
                (json.dumps(desc), int(count), json.dumps([float(x) for x in add])),
            )
            seq = int(cur.lastrowid)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'events'", (str(seq),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._acc._rdp = new
        self._entries.append((desc, int(count)))
        self._seq = seq
        return self

    def _check_budget(self, event: PrivacyEvent, count: int, total: np.ndarray) -> None:
        bad, eps, order = self._exceeds(total)
        if bad:
            raise PrivacyBudgetExceeded(
                f"Event {type(event).__name__} (count {count}) refused: total epsilon would be {eps:.6g} "
                f"(order {order:g}) > budget {self._eps_max:g} at delta={self._delta:g}. Ledger unchanged."
            )


def _check_header(path: str) -> None:
    """Refuse a file that is not an SQLite database before SQLite sees it (0 bytes, JSON, text, ...)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise LedgerError(f"Ledger file {path!r} cannot be read: {exc}.") from None
    if head != _SQLITE_MAGIC:
        what = "is empty (0 bytes)" if not head else "is not an SQLite database"
        raise LedgerError(
            f"Ledger file {path!r} {what}: not a privacy ledger. A ledger is created only at a path that does "
            "not exist; to start a new one, choose a new path."
        )


def _meta_int(meta: dict[str, str], key: str, path: str) -> int:
    try:
        return int(meta[key])
    except ValueError:
        raise LedgerError(f"Ledger file {path!r}: meta row '{key}' is {meta[key]!r}, not an integer.") from None
