"""A persistent privacy ledger with a budget filter, over any accountant of the contract (RDP by default).

The ledger stores every spend as the event itself (its exact JSON form, :mod:`.event_json`) with its count,
and re-composes the stored events on open with the accountant it is opened with, so the same file can be
budgeted with the RDP accountant (default), the PLD accountant or the check-in accountant. It adds SQLite
persistence (one transaction per event, committed *before* the caller releases anything) and a filter that
refuses an event exceeding (ε_max, δ) without touching any state. The accountants are in
:mod:`secagg_dp.accounting.core.rdp_accountant` (re-exported here) and its siblings.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import sqlite3
import stat
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_real
from secagg_dp.accounting.core.accountant import Certificate, PrivacyAccountant
from secagg_dp.accounting.core.conversion import LargestOrderWarning
from secagg_dp.accounting.core.event_json import event_from_json, event_to_json
from secagg_dp.accounting.core.events import PrivacyEvent, check_neighbouring
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

#: Value of meta 'format' written by this version: rows hold events (format 1 rows held RDP curves only);
#: format 3 adds the ``outcomes`` table and the optional meta rows ``run`` and ``certified``.
LEDGER_FORMAT = "secagg-dp-ledger/3"
#: Formats this version reads: format 1 (and its predecessor without a 'format' row) is read as RDP curves;
#: formats 1 and 2 have no outcomes and no run metadata (read as none); the first write migrates to format 3.
READABLE_FORMATS = ("secagg-dp-ledger/1", "secagg-dp-ledger/2", LEDGER_FORMAT)
_FORMAT_PREFIX = "secagg-dp-ledger/"
#: What a spent event's round turned out to be, recorded after the charge (:meth:`PrivacyLedger.record_outcome`).
OUTCOMES = ("released", "aborted", "failed")
_OUTCOMES_TABLE = (
    "CREATE TABLE IF NOT EXISTS outcomes (seq INTEGER PRIMARY KEY, outcome TEXT NOT NULL, reason TEXT NOT NULL)"
)
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event TEXT NOT NULL,
    count INTEGER NOT NULL,
    rdp TEXT NOT NULL
);
CREATE TABLE outcomes (seq INTEGER PRIMARY KEY, outcome TEXT NOT NULL, reason TEXT NOT NULL);
"""
_COLUMNS = {"meta": ["key", "value"], "events": ["seq", "event", "count", "rdp"]}
_OUTCOME_COLUMNS = ["seq", "outcome", "reason"]
_BUSY_TIMEOUT_S = 60.0
_FILE_MODE = 0o600  # a ledger says who was in which release: readable by its owner only
#: Relative tolerance of the check that a stored RDP row equals its event's curve times its count (the rows are
#: written as exactly that product, so any legitimate row matches to the last bit; the slack only absorbs a
#: future change of an event's RDP in the last digits). A count off by 1 in more than 1e9 is not detected.
_ROW_RTOL = 1e-9
#: SQLite's primary result code for a write to a database it opened read-only (SQLITE_READONLY).
_SQLITE_READONLY = 8


@dataclass(frozen=True)
class RecordedRdp(PrivacyEvent):
    """An event known only by its RDP curve at fixed orders: a row of a format-1 ledger (before events were
    stored). ε(α) is the recorded value at each recorded order (the row already includes its count); at any
    other order it is unknown, so only an RDP accountant with exactly these orders can compose it."""

    orders: tuple[float, ...]
    values: tuple[float, ...]
    neighbouring: str

    def __post_init__(self) -> None:
        check_neighbouring(self.neighbouring)
        if len(self.orders) != len(self.values) or not self.orders:
            raise ParameterError("Arguments 'orders' and 'values' must have the same, non-zero length.")
        if any(not (isinstance(v, float) and v >= 0.0) for v in self.values):  # NaN fails v >= 0
            raise ParameterError("Argument 'values' must hold floats >= 0 (no NaN).")

    def rdp(self, orders: Any) -> npt.NDArray[np.float64]:
        a = check_orders(orders)
        if not np.array_equal(a, np.asarray(self.orders, dtype=np.float64)):
            raise UnsupportedEventError(
                "A recorded RDP curve (a format-1 ledger row) is known only at the orders it was recorded at."
            )
        return np.asarray(self.values, dtype=np.float64)


class PrivacyLedger:
    """Ledger of spent events with optional SQLite persistence and an (ε_max, δ) budget filter.

    ``accountant`` (an empty :class:`~secagg_dp.accounting.core.accountant.PrivacyAccountant`; default an
    :class:`RdpAccountant` at ``orders``) composes the events: the ledger keeps its own ``accountant.fresh()``.
    ``spend(event, count)`` validates, then in ONE SQLite write transaction (``BEGIN IMMEDIATE``) reads the
    rows other handles or processes committed since, checks the budget on the committed events plus this one,
    and inserts the event (its exact JSON form, its count and, when the event has one at the ledger's orders,
    its RDP curve) — so any number of handles and processes sharing one file never exceed the budget together;
    memory is updated only after the commit. Call it *before* releasing the output, so a crash can only
    over-count. A refused event raises :class:`PrivacyBudgetExceeded` and changes nothing.

    ``PrivacyLedger(path=...)`` creates the file (mode 0600, built under a temporary name and linked into
    place, so concurrent openers of a new path all see a complete ledger) if nothing is at the path; a dangling
    symbolic link is refused. An existing file is validated before use (a regular file, checked with ``stat``
    before any open so a FIFO never blocks; SQLite header and integrity, tables and columns, meta rows,
    orders, neighbouring and budget, every event row, each stored event's RDP row recomputed from the event
    and its count (one RDP evaluation per distinct event), sequence numbers 1..N matching the event counter)
    and refused with :class:`LedgerError` if anything is off; its events are re-composed with the
    accountant. ``read_only=True`` opens an existing file without ever writing to it (for inspection;
    ``spend`` is refused). ``spend`` on a file SQLite can only open read-only, or any SQLite failure while
    writing, raises :class:`LedgerError` and spends nothing. ``neighbouring``, ``orders`` and the budget
    default to the file's. The file uses a rollback journal, so after every commit the main file alone holds
    every committed event (docs/ledger.md).

    Beside the events the ledger stores what a run says about them, never used in its own composition:
    :meth:`set_run` (the run's δ, certificate method and observer), ``spend(..., certified=...)`` (the run's
    own certified ε per observer, in the spend's transaction) and :meth:`record_outcome` (what a charged
    round turned out to be: released, aborted or failed, and why). Every event stays charged whatever its
    outcome: the charge precedes the release for crash safety, and an outcome is no proof that nothing was
    released (docs/ledger.md, "Outcomes"). Files of formats 1 and 2 open as before and are migrated to
    format 3 by the first write; a file of a newer format is refused with :class:`LedgerError`.
    """

    def __init__(
        self,
        neighbouring: str | None = None,
        orders: Any = None,
        *,
        path: str | os.PathLike[str] | None = None,
        epsilon_budget: float | None = None,
        delta: float | None = None,
        accountant: PrivacyAccountant | None = None,
        read_only: bool = False,
    ) -> None:
        if accountant is not None:
            if not isinstance(accountant, PrivacyAccountant):
                raise ParameterError(
                    f"Argument 'accountant' must be a PrivacyAccountant, not {type(accountant).__name__}."
                )
            if accountant.events:
                raise ParameterError(
                    "Argument 'accountant' must be empty (it composes the ledger's events only), "
                    f"not hold {len(accountant.events)} event(s); pass accountant.fresh()."
                )
            if neighbouring is not None and check_neighbouring(neighbouring) != accountant.neighbouring:
                raise ParameterError(
                    f"Argument 'neighbouring' is {neighbouring!r} but the accountant is {accountant.neighbouring!r}."
                )
            if isinstance(accountant, RdpAccountant):
                if orders is not None and not np.array_equal(check_orders(orders), accountant.orders):
                    raise ParameterError("Argument 'orders' differs from the RDP accountant's orders.")
                orders = accountant.orders
        # neighbouring / orders None: the file's for an existing ledger (so ledgers written with an earlier
        # default grid keep opening), else the accountant's or 'add-remove' / DEFAULT_ORDERS
        self._neighbouring_given = neighbouring is not None or accountant is not None
        self._orders_given = orders is not None
        rel = accountant.neighbouring if accountant is not None else (neighbouring or "add-remove")
        self._neighbouring = check_neighbouring(rel)
        self._orders: npt.NDArray[np.float64] = check_orders(DEFAULT_ORDERS if orders is None else orders).copy()
        self._orders.setflags(write=False)
        self._template = accountant
        self._acc: PrivacyAccountant = self._fresh_accountant()
        if (epsilon_budget is None) != (delta is None):
            raise ParameterError("Arguments 'epsilon_budget' and 'delta' must be given together, or neither.")
        self._eps_max = None if epsilon_budget is None else check_real("epsilon_budget", epsilon_budget, lo=0.0)
        self._delta = None if delta is None else check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
        self._entries: list[tuple[dict[str, Any], int]] = []
        self._events: list[tuple[PrivacyEvent, int]] = []
        # RDP of one repetition of each distinct stored event (by its JSON text) at the file's orders, None when
        # it has none there: the stored rows are checked against it (one evaluation per distinct event)
        self._curves: dict[str, npt.NDArray[np.float64] | None] = {}
        self._conn: sqlite3.Connection | None = None
        self._seq = 0  # highest event seq read from the file
        self._format = LEDGER_FORMAT
        self._has_outcomes = False
        self._outcomes: dict[int, tuple[str, str]] = {}  # seq -> (outcome, reason)
        self._run: dict[str, Any] | None = None
        self._certified: dict[str, dict[str, Any]] = {}
        self._path: str | None = None
        if not isinstance(read_only, bool):
            raise ParameterError(f"Argument 'read_only' must be True or False, not {read_only!r}.")
        if read_only and path is None:
            raise ParameterError("Argument 'read_only' needs 'path': a ledger without a file is never read-only.")
        self._read_only = read_only
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

    def _fresh_accountant(self) -> PrivacyAccountant:
        if self._template is None:
            return RdpAccountant(self._neighbouring, self._orders)
        return self._template.fresh()

    # -- persistence -------------------------------------------------------------------------------
    def _open(self, path: str) -> None:
        if os.path.lexists(path) and not os.path.exists(path):
            raise LedgerError(
                f"Ledger file {path!r} is a dangling symbolic link (to {os.readlink(path)!r}): refusing to create a "
                "new, empty ledger at its target. Point it at an existing ledger or choose a new path."
            )
        if os.path.lexists(path):  # stat before any open(): opening a FIFO for reading blocks until a writer comes
            try:
                _check_regular(path, os.stat(path).st_mode)
            except OSError as exc:
                raise LedgerError(f"Ledger file {path!r} cannot be read: {exc}.") from None
        if not os.path.lexists(path):
            if self._read_only:
                raise LedgerError(f"Ledger file {path!r} does not exist (opened read-only: nothing is created).")
            self._create(path)
        _check_header(path)
        if self._read_only:  # SQLite refuses every write on this connection
            uri = f"{pathlib.Path(path).absolute().as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=_BUSY_TIMEOUT_S)
        else:
            conn = sqlite3.connect(path, isolation_level=None, timeout=_BUSY_TIMEOUT_S)
        self._conn = conn
        conn.execute("BEGIN" if self._read_only else "BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                raise LedgerError(f"Ledger file {path!r} is an SQLite database with no tables: not a ledger.")
            self._validate(conn, path, tables)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if self._read_only:
            return
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "delete":
            try:  # older ledgers used WAL: fold it into the main file and switch to a rollback journal
                conn.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.OperationalError:
                pass  # another process holds it open; the WAL is checkpointed on close
        conn.execute("PRAGMA synchronous=FULL")

    def _meta_rows(self) -> list[tuple[str, str]]:
        rows = [
            ("format", LEDGER_FORMAT),
            ("neighbouring", self._neighbouring),
            ("orders", _orders_json(self._orders)),
            ("events", "0"),
        ]
        if self._eps_max is not None and self._delta is not None:
            rows += [("epsilon_budget", repr(self._eps_max)), ("delta", repr(self._delta))]
        return rows

    def _create(self, path: str) -> None:
        """Build a complete, empty ledger under a temporary name next to ``path`` (mode 0600) and link it into
        place: ``path`` appears atomically with its tables, and never replaces a file another process created
        meanwhile (then that file is opened instead)."""
        folder = os.path.dirname(os.path.abspath(path))
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".new", dir=folder)
        except OSError as exc:
            raise LedgerError(f"Ledger file {path!r} cannot be created: {exc}.") from None
        os.close(fd)
        try:
            os.chmod(tmp, _FILE_MODE)
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=DELETE")
                conn.execute("BEGIN IMMEDIATE")
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.executemany("INSERT INTO meta VALUES (?, ?)", self._meta_rows())
                conn.execute("COMMIT")
            finally:
                conn.close()
            try:
                os.link(tmp, path)  # fails if anything is at path: never replaces another creator's ledger
            except FileExistsError:
                pass
            except OSError:  # no hard links on this file system: rename, unless someone was first
                if not os.path.lexists(path):
                    os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _validate(self, conn: sqlite3.Connection, path: str, tables: set[str]) -> None:
        """Refuse anything but an intact ledger of this neighbouring relation, orders and budget."""
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
        if not legacy and meta["format"] not in READABLE_FORMATS:
            raise LedgerError(_format_message(path, meta["format"]))
        self._format = READABLE_FORMATS[0] if legacy else meta["format"]
        if "outcomes" in tables:
            have = [r[1] for r in conn.execute("PRAGMA table_info(outcomes)")]
            if have != _OUTCOME_COLUMNS:
                raise LedgerError(
                    f"Ledger file {path!r}: table 'outcomes' has columns {have}, expected {_OUTCOME_COLUMNS}."
                )
        elif self._format == LEDGER_FORMAT:
            raise LedgerError(f"Ledger file {path!r} has no 'outcomes' table: damaged or not a ledger.")
        self._has_outcomes = "outcomes" in tables
        self._check_meta(path, meta)
        self._run = _parse_run(path, meta.get("run"))
        self._certified = _parse_certified(path, meta.get("certified"))
        n_rows, max_seq = conn.execute("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM events").fetchone()
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        last = 0 if row is None else int(row[0])
        counter = n_rows if legacy else _meta_int(meta, "events", path)
        if not (n_rows == max_seq == last == counter):
            raise LedgerError(
                f"Ledger file {path!r} is damaged: {n_rows} event rows, highest sequence number {max_seq}, "
                f"{last} ever inserted, event counter {counter}; events were deleted or the file is incomplete."
            )
        if legacy and not self._read_only:
            conn.executemany(
                "INSERT INTO meta VALUES (?, ?)", [("format", READABLE_FORMATS[0]), ("events", str(n_rows))]
            )
        self._read_new_rows(conn)
        self._read_outcomes(conn)

    def _read_outcomes(self, conn: sqlite3.Connection) -> None:
        """Re-read every recorded outcome (they may be recorded after their event, by any handle) and the
        run's certified epsilons (replaced with every spend); call inside a transaction."""
        if not self._has_outcomes:
            has = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'outcomes'").fetchone()
            if has is None:
                return
            self._has_outcomes = True
        outcomes: dict[int, tuple[str, str]] = {}
        for seq, outcome, reason in conn.execute("SELECT seq, outcome, reason FROM outcomes ORDER BY seq"):
            if outcome not in OUTCOMES or not isinstance(reason, str) or not isinstance(seq, int):
                raise LedgerError(
                    f"Ledger file {self._path!r}: outcome of event {seq!r} is {outcome!r}; expected one of {OUTCOMES}."
                )
            if 1 <= seq <= self._seq:  # an outcome recorded after a later read: shown once its event is read
                outcomes[seq] = (outcome, reason)
        self._outcomes = outcomes
        row = conn.execute("SELECT value FROM meta WHERE key = 'certified'").fetchone()
        self._certified = _parse_certified(self._path or "", None if row is None else row[0])

    def _check_meta(self, path: str, meta: dict[str, str]) -> None:
        """Adopt or check the file's neighbouring relation, orders and budget."""
        if not self._neighbouring_given:
            try:
                self._neighbouring = check_neighbouring(meta["neighbouring"])
            except ParameterError:
                raise LedgerError(f"Ledger file {path!r} has neighbouring {meta['neighbouring']!r}: damaged.") from None
        orders_json = _orders_json(self._orders)
        if meta["orders"] != orders_json and not self._orders_given:
            try:
                stored = check_orders(json.loads(meta["orders"]))
            except (ValueError, TypeError) as exc:
                raise LedgerError(f"Ledger file {path!r} has unreadable orders: damaged.") from exc
            self._orders = stored.copy()
            self._orders.setflags(write=False)
            orders_json = meta["orders"]
        if meta["neighbouring"] != self._neighbouring or meta["orders"] != orders_json:
            raise ParameterError(
                f"Ledger file {path!r} was created with neighbouring={meta['neighbouring']!r} and other "
                "orders; open it with the same neighbouring relation and orders."
            )
        self._acc = self._fresh_accountant()
        if ("epsilon_budget" in meta) != ("delta" in meta):
            raise LedgerError(f"Ledger file {path!r} has only one of the meta rows 'epsilon_budget', 'delta'.")
        if "epsilon_budget" in meta:
            try:
                eps = check_real("epsilon_budget", float(meta["epsilon_budget"]), lo=0.0)
                dlt = check_real("delta", float(meta["delta"]), lo=0.0, hi=1.0, lo_open=True, hi_open=True)
            except ValueError:
                raise LedgerError(f"Ledger file {path!r} has an unreadable budget: damaged.") from None
            if self._eps_max is None:
                self._eps_max, self._delta = eps, dlt
            elif self._delta != dlt or self._eps_max > eps:
                raise ParameterError(
                    f"Ledger file {path!r} was created with budget epsilon {eps!r} at delta {dlt!r}; a handle may "
                    f"only tighten it (same delta, smaller epsilon), not use epsilon {self._eps_max!r} at delta "
                    f"{self._delta!r}."
                )

    def _read_new_rows(self, conn: sqlite3.Connection) -> None:
        """Validate the rows committed after ``self._seq`` and compose them, in order (call inside a transaction).

        Each row is composed before the next is read, so on an error the ledger holds a prefix of the file."""
        rows = conn.execute(
            "SELECT seq, event, count, rdp FROM events WHERE seq > ? ORDER BY seq", (self._seq,)
        ).fetchall()
        for seq, ev_json, count, rdp_json in rows:
            event, desc, cnt, times = self._parse_row(seq, ev_json, count, rdp_json)
            try:
                self._acc.compose(event, times)
            except ParameterError as exc:
                hint = (
                    " (a format-1 row is an RDP curve: open with the RDP accountant)"
                    if isinstance(event, RecordedRdp)
                    else ""
                )
                raise UnsupportedEventError(
                    f"Ledger file {self._path!r}, event {seq}: {type(self._acc).__name__} cannot compose it ({exc}). "
                    f"Open the ledger with an accountant that supports every event it holds{hint}."
                ) from None
            self._entries.append((desc, cnt))
            self._events.append((event, cnt))
            self._seq = int(seq)

    def _parse_row(
        self, seq: Any, ev_json: Any, count: Any, rdp_json: Any
    ) -> tuple[PrivacyEvent, dict[str, Any], int, int]:
        """(event to compose, description, count, repetitions to compose) of one row."""
        where = f"Ledger file {self._path!r}, event {seq}"
        try:
            obj = json.loads(ev_json)
            values = json.loads(rdp_json)
        except (TypeError, ValueError) as exc:
            raise LedgerError(f"{where}: not valid JSON ({exc}).") from None
        if not isinstance(obj, dict):
            raise LedgerError(f"{where}: the event description is not a JSON object.")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise LedgerError(f"{where}: count must be an integer >= 0, not {count!r}.")
        stored = list(obj) == ["dataclass"]  # a stored event (format 2); else a format-1 description
        rdp: npt.NDArray[np.float64] | None = None
        if values is not None or not stored:
            if (
                not isinstance(values, list)
                or len(values) != self._orders.size
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            ):
                raise LedgerError(f"{where}: the RDP row must be {self._orders.size} numbers, one per order.")
            rdp = np.asarray(values, dtype=np.float64)
            if np.any(np.isnan(rdp)) or np.any(rdp < 0.0):
                raise LedgerError(f"{where}: the RDP row has a NaN or negative value; refusing to under-count.")
        if not stored:
            recorded = RecordedRdp(
                tuple(float(a) for a in self._orders), tuple(float(v) for v in values), self._neighbouring
            )
            return recorded, obj, count, 1
        try:
            event = event_from_json(ev_json)
        except ParameterError as exc:
            raise LedgerError(f"{where}: the stored event cannot be read ({exc}).") from None
        expected = self._expected_row(ev_json, event, count)
        if (rdp is None) != (expected is None) or (
            rdp is not None and expected is not None and not np.allclose(rdp, expected, rtol=_ROW_RTOL, atol=0.0)
        ):
            raise LedgerError(
                f"{where}: the stored RDP row does not match the stored event spent {count} time(s) (recomputed "
                "from the event): the count or the row was changed; refusing to open a ledger that may under-count."
            )
        return event, event.describe(), count, count

    def _expected_row(self, key: str, event: PrivacyEvent, count: int) -> npt.NDArray[np.float64] | None:
        """The ``rdp`` column :meth:`spend` writes for ``count`` repetitions of ``event``: its curve at the file's
        orders times ``count`` (zeros for 0), None when it has no finite curve there. The curve of one
        repetition is computed once per distinct event (``key``, its JSON text) and cached, so checking N rows
        of E distinct events costs E RDP evaluations plus O(N · orders) arithmetic."""
        if key not in self._curves:
            try:
                curve: npt.NDArray[np.float64] | None = RdpAccountant(self._neighbouring, self._orders).event_rdp(
                    event, 1
                )
            except ParameterError:
                curve = None
            self._curves[key] = curve
        one = self._curves[key]
        if one is None:
            return None
        with np.errstate(over="ignore", invalid="ignore"):  # as RdpAccountant.event_rdp: count·ε(α) may be +inf
            row = count * one if count else np.zeros_like(one)
        return row if bool(np.all(np.isfinite(row))) else None

    def _refresh(self) -> None:
        """Read rows other handles or processes committed since the last read."""
        if self._conn is not None:
            conn = self._conn
            conn.execute("BEGIN")
            try:
                self._read_new_rows(conn)
                self._read_outcomes(conn)
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
        """Copy the ledger to ``dest`` consistently while it may be in use (SQLite online backup; a new
        ``dest`` is created with mode 0600)."""
        if self._conn is None:
            raise LedgerError("This ledger has no file to copy (created without 'path').")
        target_path = os.fspath(dest)
        if not os.path.lexists(target_path):
            os.close(os.open(target_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE))
        target = sqlite3.connect(target_path)
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
        return self._neighbouring

    @property
    def orders(self) -> npt.NDArray[np.float64]:
        """Rényi orders of the file's RDP rows (and of the default RDP accountant)."""
        return self._orders

    @property
    def accountant(self) -> PrivacyAccountant:
        """The accountant composing the ledger's events (a copy: spending goes through :meth:`spend`)."""
        return self._acc.copy()

    @property
    def path(self) -> str | None:
        return self._path

    @property
    def format(self) -> str:
        """The file's format (an older file keeps its format until the first write by this version)."""
        return self._format

    @property
    def epsilon_budget(self) -> float | None:
        return self._eps_max

    @property
    def delta(self) -> float | None:
        """The budget's δ (None without a budget)."""
        return self._delta

    @property
    def rdp(self) -> npt.NDArray[np.float64]:
        """Composed RDP of every event committed when last read (RDP accountant only)."""
        if not isinstance(self._acc, RdpAccountant):
            raise ParameterError(f"This ledger composes with {type(self._acc).__name__}, which has no RDP curve.")
        return self._acc.rdp

    @property
    def run(self) -> dict[str, Any] | None:
        """The run's ``{"delta", "method", "observer"}`` as stored by :meth:`set_run` (None if never set)."""
        return None if self._run is None else dict(self._run)

    @property
    def certified(self) -> dict[str, dict[str, Any]]:
        """The caller's certificate per observer as last stored by :meth:`spend` (``"events"``: how many events
        it covers); empty if none was stored. These are the run's numbers, not recomputed by the ledger."""
        return {obs: dict(c) for obs, c in self._certified.items()}

    @property
    def outcomes(self) -> list[tuple[str, str] | None]:
        """(outcome, reason) per spent event, aligned with :attr:`events`; None where none was recorded."""
        return [self._outcomes.get(i) for i in range(1, len(self._events) + 1)]

    @property
    def entries(self) -> list[tuple[dict[str, Any], int]]:
        """(event description, count) for every spent event, oldest first (a copy)."""
        return list(self._entries)

    @property
    def events(self) -> list[tuple[PrivacyEvent, int]]:
        """(event, count) for every spent event, oldest first; a format-1 row is a :class:`RecordedRdp`."""
        return list(self._events)

    def certificate(self, delta: float | None = None) -> Certificate:
        """The accountant's certificate of everything committed (re-read from the file) at ``delta``
        (default: the budget's δ)."""
        d = self._delta if delta is None else delta
        if d is None:
            raise ParameterError("Argument 'delta' is required when the ledger has no budget.")
        self._refresh()
        return self._acc.certificate(d)

    def epsilon(self, delta: float | None = None) -> tuple[float, float]:
        """(ε, order) of everything committed (re-read from the file), at ``delta`` (default: the budget's δ);
        the order is NaN for an accountant that is not RDP."""
        cert = self.certificate(delta)
        return cert.epsilon, math.nan if cert.order is None else float(cert.order)

    def supports(self, event: Any) -> bool:
        """True if :meth:`spend` accepts ``event`` budget aside: the accountant composes it and, for a file
        ledger, it can be stored exactly (a class under ``secagg_dp.accounting.``)."""
        if not self._acc.supports(event):
            return False
        if self._conn is not None:
            try:
                event_to_json(event)
            except ParameterError:
                return False
        return True

    def would_exceed(self, event: PrivacyEvent, count: int = 1) -> bool:
        """True if spending ``event`` now would exceed the budget (False when there is no budget)."""
        if self._eps_max is None:
            return False
        self._refresh()
        return self._with(event, count)[1]

    def _with(self, event: PrivacyEvent, count: int) -> tuple[PrivacyAccountant, bool, float]:
        """(accountant with ``event`` composed, whether that exceeds the budget, its ε); no state change."""
        candidate = self._acc.copy().compose(event, count)
        if self._eps_max is None or self._delta is None:
            return candidate, False, math.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LargestOrderWarning)
            eps = candidate.get_epsilon(self._delta)
        return candidate, not eps <= self._eps_max, eps

    # -- spending ----------------------------------------------------------------------------------
    def spend(
        self, event: PrivacyEvent, count: int = 1, *, certified: Mapping[str, Mapping[str, Any]] | None = None
    ) -> PrivacyLedger:
        """Record ``count`` repetitions of ``event`` or raise without writing anything.

        ``certified`` (optional): the caller's own certificate of everything spent so far *including* this
        event, per observer (``{"analyst": {"epsilon": ..., "delta": ..., "method": ...}, ...}``, e.g. a
        simulator's window or PLD certificate, which can be tighter than the ledger's RDP composition). It is
        stored in the same transaction as the event (meta row ``certified``, stamped with the event count it
        covers), so it never describes fewer events than the file holds unless a later spend omitted it."""
        if self._read_only:
            raise LedgerError(f"Ledger file {self._path!r} was opened read-only: nothing can be spent in it.")
        cert = None if certified is None else _check_certified_arg(certified)
        candidate, bad, eps = self._with(event, count)  # validates count too
        desc = event.describe()
        if self._conn is None:
            self._check_budget(event, count, bad, eps)
            self._commit_memory(candidate, event, desc, count)
            self._seq += 1
            if cert is not None:
                self._certified = {obs: {**c, "events": self._seq} for obs, c in cert.items()}
            return self
        text = event_to_json(event)
        rdp = self._rdp_row(text, event, count)
        try:
            seq, candidate = self._insert(event, count, text, rdp, (candidate, bad, eps), cert)
        except sqlite3.Error as exc:  # the transaction was rolled back: nothing was spent
            raise self._write_error(exc, "nothing was spent") from None
        self._commit_memory(candidate, event, desc, count)
        self._format = LEDGER_FORMAT
        self._has_outcomes = True
        self._seq = seq
        if cert is not None:
            self._certified = {obs: {**c, "events": seq} for obs, c in cert.items()}
        return self

    def _write_error(self, exc: sqlite3.Error, what: str) -> LedgerError:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF == _SQLITE_READONLY:
            return LedgerError(
                f"Ledger file {self._path!r} is read-only (SQLite: {exc}): {what}. Make the file and "
                "its directory writable to spend, or open it with read_only=True to inspect it."
            )
        return LedgerError(f"Ledger file {self._path!r} cannot be written ({exc}): {what}.")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Inside a write transaction: bring a format-1/2 file to this format (add the outcomes table)."""
        if self._format != LEDGER_FORMAT:
            conn.execute(_OUTCOMES_TABLE)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'format'", (LEDGER_FORMAT,))

    def _write(self, what: str, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Run ``statements`` in one write transaction (migrating the file first); LedgerError on failure."""
        if self._read_only:
            raise LedgerError(f"Ledger file {self._path!r} was opened read-only: {what} cannot be recorded in it.")
        assert self._conn is not None
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._migrate(conn)
                for sql, params in statements:
                    conn.execute(sql, params)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._write_error(exc, f"{what} was not recorded") from None
        self._format = LEDGER_FORMAT
        self._has_outcomes = True

    def set_run(self, *, delta: float, method: str, observer: str) -> PrivacyLedger:
        """Store the run's δ and the method and observer of its certificate (meta row ``run``), so a reader
        reports ε at the run's δ without being told it. Replaces an earlier ``run`` row."""
        run = _check_run(
            {
                "delta": check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True),
                "method": method,
                "observer": observer,
            },
            "Argument",
        )
        if self._conn is not None:
            self._write("the run's delta", [("INSERT OR REPLACE INTO meta VALUES ('run', ?)", (json.dumps(run),))])
        self._run = run
        return self

    def record_outcome(self, outcome: str, reason: str = "", *, seq: int | None = None) -> PrivacyLedger:
        """Record what the round charged as event ``seq`` (default: the last event this handle read or spent)
        turned out to be: ``"released"``, ``"aborted"`` (nothing released) or ``"failed"`` (the run failed after
        the charge; ``reason`` says how). The charge itself is never changed: the event stays in every epsilon
        (docs/ledger.md, "Outcomes"). Replaces an earlier outcome of the same event."""
        if outcome not in OUTCOMES:
            raise ParameterError(f"Argument 'outcome' must be one of {OUTCOMES}, not {outcome!r}.")
        if not isinstance(reason, str):
            raise ParameterError(f"Argument 'reason' must be a string, not {type(reason).__name__}.")
        target = self._seq if seq is None else seq
        if isinstance(target, int) and target > self._seq:  # maybe spent by another handle since the last read
            self._refresh()
        if isinstance(target, bool) or not isinstance(target, int) or not 1 <= target <= self._seq:
            raise ParameterError(f"Argument 'seq' must be the number of a spent event, 1..{self._seq}, not {target!r}.")
        if self._conn is not None:
            self._write(
                "the outcome",
                [("INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?)", (target, outcome, reason))],
            )
        self._outcomes[target] = (outcome, reason)
        return self

    def _insert(
        self,
        event: PrivacyEvent,
        count: int,
        text: str,
        rdp: str,
        checked: tuple[PrivacyAccountant, bool, float],
        certified: dict[str, dict[str, Any]] | None = None,
    ) -> tuple[int, PrivacyAccountant]:
        """One write transaction: read the rows committed meanwhile, check the budget, insert. Returns the new
        seq and the accountant with the event composed (``checked`` is :meth:`_with` before the transaction);
        the caller updates memory only after this commit."""
        assert self._conn is not None
        conn = self._conn
        candidate, bad, eps = checked
        conn.execute("BEGIN IMMEDIATE")  # the write lock: no other writer between the check and the insert
        try:
            seen = self._seq
            self._read_new_rows(conn)
            if self._seq != seen:  # another handle committed meanwhile: check against the new total
                candidate, bad, eps = self._with(event, count)
            self._check_budget(event, count, bad, eps)
            cur = conn.execute("INSERT INTO events (event, count, rdp) VALUES (?, ?, ?)", (text, int(count), rdp))
            seq = int(cur.lastrowid or 0)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'events'", (str(seq),))
            self._migrate(conn)
            if certified is not None:
                stamped = {obs: {**c, "events": seq} for obs, c in certified.items()}
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('certified', ?)", (json.dumps(stamped),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return seq, candidate

    def _commit_memory(
        self, candidate: PrivacyAccountant, event: PrivacyEvent, desc: dict[str, Any], count: int
    ) -> None:
        self._acc = candidate
        self._entries.append((desc, int(count)))
        self._events.append((event, int(count)))

    def _rdp_row(self, key: str, event: PrivacyEvent, count: int) -> str:
        """JSON of the event's RDP curve at the ledger's orders times ``count``, or ``null`` when it has no finite
        curve there (JSON has no inf; the event itself is the record). Opening checks every row against it."""
        curve = self._expected_row(key, event, count)
        return "null" if curve is None else json.dumps([float(x) for x in curve])

    def _check_budget(self, event: PrivacyEvent, count: int, bad: bool, eps: float) -> None:
        if bad:
            raise PrivacyBudgetExceeded(
                f"Event {type(event).__name__} (count {count}) refused: total epsilon would be {eps:.6g} "
                f"({self._acc.method}) > budget {self._eps_max:g} at delta={self._delta:g}. Ledger unchanged."
            )


def _format_message(path: str, fmt: str) -> str:
    """Why a file of format ``fmt`` is refused: written by a newer version, or not a ledger format at all."""
    if fmt.startswith(_FORMAT_PREFIX):
        try:
            newer = int(fmt[len(_FORMAT_PREFIX) :]) > int(LEDGER_FORMAT[len(_FORMAT_PREFIX) :])
        except ValueError:
            newer = False
        if newer:
            return (
                f"Ledger file {path!r} has format {fmt!r}, written by a newer version of secagg-dp; this version "
                f"reads formats up to {LEDGER_FORMAT!r}. Upgrade secagg-dp to read it (the file was not changed)."
            )
    return f"Ledger file {path!r} has format {fmt!r}; this version reads {READABLE_FORMATS}."


def _check_run(run: Any, where: str) -> dict[str, Any]:
    """A valid ``run`` object (δ in (0, 1), method and observer non-empty strings) or ParameterError."""
    if not isinstance(run, dict) or set(run) != {"delta", "method", "observer"}:
        raise ParameterError(f"{where} 'run' must have exactly the keys delta, method, observer, not {run!r}.")
    d = run["delta"]
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 < d < 1.0:
        raise ParameterError(f"{where} 'delta' must be a number in (0, 1), not {d!r}.")
    for key in ("method", "observer"):
        if not isinstance(run[key], str) or not run[key]:
            raise ParameterError(f"{where} '{key}' must be a non-empty string, not {run[key]!r}.")
    return {"delta": float(d), "method": run["method"], "observer": run["observer"]}


def _check_certified_arg(certified: Any) -> dict[str, dict[str, Any]]:
    """``certified`` as plain JSON-able dicts: observer -> {"epsilon" >= 0 (or inf), "delta" in (0, 1), ...}."""
    if not isinstance(certified, Mapping):
        raise ParameterError(f"Argument 'certified' must be a mapping observer -> certificate, not {certified!r}.")
    out: dict[str, dict[str, Any]] = {}
    for obs, cert in certified.items():
        if not isinstance(obs, str) or not obs or not isinstance(cert, Mapping):
            raise ParameterError(f"Argument 'certified' must map observer names to mappings, not {obs!r}: {cert!r}.")
        eps, d = cert.get("epsilon"), cert.get("delta")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0.0:
            raise ParameterError(f"Argument 'certified[{obs!r}][\"epsilon\"]' must be a number >= 0, not {eps!r}.")
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 < d < 1.0:
            raise ParameterError(f"Argument 'certified[{obs!r}][\"delta\"]' must be in (0, 1), not {d!r}.")
        item = {str(k): v for k, v in cert.items()}
        if math.isinf(eps):  # an infinite epsilon is a valid (vacuous) certificate: stored as null
            item["epsilon"] = None
        try:
            json.dumps(item, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"Argument 'certified[{obs!r}]' must be plain JSON ({exc}).") from None
        out[obs] = item
    return out


def _parse_run(path: str, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        return _check_run(json.loads(text), f"Ledger file {path!r}: meta row")
    except (ValueError, ParameterError) as exc:
        raise LedgerError(f"Ledger file {path!r} has an unreadable meta row 'run' ({exc}): damaged.") from None


def _parse_certified(path: str, text: str | None) -> dict[str, dict[str, Any]]:
    if text is None:
        return {}
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict) or not all(isinstance(v, dict) for v in obj.values()):
            raise ValueError("not an object of objects")
    except ValueError as exc:
        raise LedgerError(f"Ledger file {path!r} has an unreadable meta row 'certified' ({exc}): damaged.") from None
    return obj


def _orders_json(orders: npt.NDArray[np.float64]) -> str:
    return json.dumps([float(x) for x in orders])


def _check_regular(path: str, mode: int) -> None:
    """Refuse anything but a regular file (a FIFO would block the opener, a device or socket is no ledger)."""
    if stat.S_ISREG(mode):
        return
    kinds = {
        stat.S_ISFIFO: "a FIFO (named pipe), which would block the opener",
        stat.S_ISDIR: "a directory",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    kind = next((name for test, name in kinds.items() if test(mode)), "of another kind")
    raise LedgerError(
        f"Ledger file {path!r} cannot be read as a ledger: it is not a regular file but {kind}; refusing to open it."
    )


def _check_header(path: str) -> None:
    """Refuse a file that is not an SQLite database before SQLite sees it (0 bytes, JSON, text, ...).

    Opened non-blocking and checked to be a regular file first, so a FIFO swapped in after the caller's
    ``stat`` is refused instead of blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            _check_regular(path, os.fstat(fd).st_mode)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                head = fh.read(len(_SQLITE_MAGIC))
        finally:
            os.close(fd)
    except OSError as exc:
        raise LedgerError(f"Ledger file {path!r} cannot be read: {exc}.") from None
    if head != _SQLITE_MAGIC:
        what = "is empty (0 bytes)" if not head else "is not an SQLite database"
        raise LedgerError(
            f"Ledger file {path!r} {what}: not a privacy ledger. A ledger is created only at a path where nothing "
            "exists; to start a new one, choose a new path."
        )


def _meta_int(meta: dict[str, str], key: str, path: str) -> int:
    try:
        return int(meta[key])
    except ValueError:
        raise LedgerError(f"Ledger file {path!r}: meta row '{key}' is {meta[key]!r}, not an integer.") from None
