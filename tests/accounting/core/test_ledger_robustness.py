"""The ledger never under-counts: concurrent writers, damaged or foreign files, copies after a crash."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from secagg_dp.accounting import DEFAULT_ORDERS, Gaussian, LedgerError, PrivacyLedger, RdpAccountant
from secagg_dp.errors import PrivacyBudgetExceeded, SecAggDPError

EV = Gaussian(20.0, 1.0, "add-remove")
DELTA = 1e-5


def _budget_for(spends: int) -> float:
    """ε after ``spends`` events, from the in-memory accountant (no file involved)."""
    return RdpAccountant("add-remove").compose(EV, spends).get_epsilon(DELTA)


def _ledger_with_events(path, n: int = 3) -> None:
    with PrivacyLedger("add-remove", path=path) as led:
        for _ in range(n):
            led.spend(EV)


def _sql(path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for st in statements:
            conn.execute(st)
    finally:
        conn.close()


# -- damaged or foreign files: each must be refused with LedgerError, never opened as "little spent" ---------


def _zero_bytes(path):
    path.write_bytes(b"")


def _json_file(path):
    path.write_text(json.dumps({"events": []}))


def _dropped_events(path):
    _ledger_with_events(path)
    _sql(path, "DROP TABLE events")


def _deleted_meta(key):
    def damage(path):
        _ledger_with_events(path)
        _sql(path, f"DELETE FROM meta WHERE key = '{key}'")

    damage.__name__ = f"deleted_meta_{key}"
    return damage


def _deleted_event(path):
    _ledger_with_events(path)
    _sql(path, "DELETE FROM events WHERE seq = 2")


def _deleted_last_event_and_counter(path):
    _ledger_with_events(path)
    _sql(path, "DELETE FROM events WHERE seq = 3", "UPDATE meta SET value = '2' WHERE key = 'events'")


def _short_rdp_row(path):
    _ledger_with_events(path)
    _sql(path, "UPDATE events SET rdp = '[0.1, 0.2]' WHERE seq = 1")


def _negative_rdp(path):
    _ledger_with_events(path)
    row = json.dumps([-1.0] * len(DEFAULT_ORDERS))
    _sql(path, f"UPDATE events SET rdp = '{row}' WHERE seq = 1")


def _nan_rdp(path):
    _ledger_with_events(path)
    row = json.dumps([float("nan")] * len(DEFAULT_ORDERS))
    _sql(path, f"UPDATE events SET rdp = '{row}' WHERE seq = 1")


def _garbage_event_json(path):
    _ledger_with_events(path)
    _sql(path, "UPDATE events SET event = '{not json' WHERE seq = 1")


def _foreign_event_type(path):
    # a stored event naming a module outside secagg_dp.accounting: refused without importing it
    _ledger_with_events(path)
    _sql(
        path,
        "UPDATE events SET event = replace(event, 'secagg_dp.accounting.core.events', 'antigravity') WHERE seq = 2",
    )


def _invalid_event_fields(path):
    _ledger_with_events(path)
    _sql(path, "UPDATE events SET event = replace(event, '\"sigma\":20.0', '\"sigma\":-20.0') WHERE seq = 3")


def _negative_count(path):
    _ledger_with_events(path)
    _sql(path, "UPDATE events SET count = -1 WHERE seq = 1")


def _other_database(path):
    _sql(path, "CREATE TABLE t (x INTEGER)")


def _empty_database(path):
    _sql(path, "PRAGMA user_version = 1")


def _truncated(path):
    _ledger_with_events(path, 50)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGES = [
    _zero_bytes,
    _json_file,
    _dropped_events,
    _deleted_meta("format"),
    _deleted_meta("events"),
    _deleted_meta("orders"),
    _deleted_meta("neighbouring"),
    _deleted_event,
    _deleted_last_event_and_counter,
    _short_rdp_row,
    _negative_rdp,
    _nan_rdp,
    _garbage_event_json,
    _foreign_event_type,
    _invalid_event_fields,
    _negative_count,
    _other_database,
    _empty_database,
    _truncated,
]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__.strip("_"))
def test_damaged_or_foreign_file_is_refused(tmp_path, damage):
    path = tmp_path / "ledger.sqlite"
    damage(path)
    before = path.read_bytes()
    with pytest.raises(LedgerError) as info:
        PrivacyLedger("add-remove", path=path)
    assert isinstance(info.value, SecAggDPError) and "ledger.sqlite" in str(info.value)
    assert path.read_bytes() == before  # refusing never repairs or rewrites the file
    assert "antigravity" not in sys.modules


def test_intact_ledger_reopens_with_every_event(tmp_path):
    path = tmp_path / "ledger.sqlite"
    _ledger_with_events(path, 4)
    with PrivacyLedger("add-remove", path=path) as led:
        assert len(led.entries) == 4
        assert np.allclose(led.rdp, 4 * EV.rdp(DEFAULT_ORDERS), rtol=1e-15, atol=0)


def test_legacy_ledger_without_format_row_is_read_and_upgraded(tmp_path):
    # the layout written before the 'format' and 'events' meta rows existed
    path = tmp_path / "old.sqlite"
    orders = json.dumps([float(x) for x in DEFAULT_ORDERS])
    row = json.dumps([float(x) for x in EV.rdp(DEFAULT_ORDERS)])
    _sql(
        path,
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, count INTEGER NOT NULL, "
        "rdp TEXT NOT NULL)",
        "INSERT INTO meta VALUES ('neighbouring', 'add-remove')",
        f"INSERT INTO meta VALUES ('orders', '{orders}')",
        f"INSERT INTO events (event, count, rdp) VALUES ('{{}}', 1, '{row}')",
    )
    with PrivacyLedger("add-remove", path=path) as led:
        assert len(led.entries) == 1
    _sql(path, "DELETE FROM events")  # now the upgraded counter says 1: a deletion is detected
    with pytest.raises(LedgerError, match="deleted"):
        PrivacyLedger("add-remove", path=path)


def test_copy_of_a_wal_ledger_without_its_wal_file_is_refused(tmp_path):
    # An older ledger in WAL mode whose content still sits in the -wal file (a kill -9 before any
    # checkpoint): the main file alone holds no tables; it must not open as an empty ledger.
    path = tmp_path / "wal.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('neighbouring', 'add-remove')")
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(path, copy)  # main file only
    conn.close()
    with pytest.raises(LedgerError):
        PrivacyLedger("add-remove", path=copy)


_CHILD_KILLED = textwrap.dedent(
    """
    import sys
    from secagg_dp.accounting import PrivacyLedger, Gaussian
    led = PrivacyLedger("add-remove", path=sys.argv[1])
    ev = Gaussian(20.0, 1.0, "add-remove")
    for i in range(100000):
        led.spend(ev, 1)
        print(i, flush=True)
    """
)


def test_plain_copy_after_kill_9_holds_every_acknowledged_event(tmp_path, run_until_killed):
    path = tmp_path / "crash.sqlite"
    _ledger_with_events(path, 0)
    acknowledged = run_until_killed(_CHILD_KILLED, path, 20)
    assert acknowledged >= 20
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(path, copy)  # the main file only: no journal, no WAL
    with PrivacyLedger("add-remove", path=copy) as led:
        assert len(led.entries) >= acknowledged + 1


def test_backup_is_a_complete_ledger(tmp_path):
    path = tmp_path / "a.sqlite"
    with PrivacyLedger("add-remove", path=path) as led:
        led.spend(EV, 3)
        led.backup(tmp_path / "b.sqlite")
    with PrivacyLedger("add-remove", path=tmp_path / "b.sqlite") as copy:
        assert copy.entries == [(EV.describe(), 3)]


# -- concurrent writers ------------------------------------------------------------------------------------


def test_two_handles_in_one_process_share_the_budget(tmp_path):
    path = tmp_path / "shared.sqlite"
    budget = _budget_for(40)
    a = PrivacyLedger("add-remove", path=path, epsilon_budget=budget, delta=DELTA)
    b = PrivacyLedger("add-remove", path=path, epsilon_budget=budget, delta=DELTA)
    accepted = 0
    for _ in range(60):
        for led in (a, b):
            try:
                led.spend(EV)
                accepted += 1
            except PrivacyBudgetExceeded:
                pass
    eps_a, eps_b = a.epsilon()[0], b.epsilon()[0]
    a.close()
    b.close()
    with PrivacyLedger("add-remove", path=path) as led:
        assert len(led.entries) == accepted
        final = led.epsilon(DELTA)[0]
    assert final <= budget and eps_a == eps_b == final
    assert 39 <= accepted <= 40  # the budget was chosen as epsilon after exactly 40 events


_CHILD_SPENDER = textwrap.dedent(
    """
    import sys
    from secagg_dp.accounting import PrivacyLedger, Gaussian
    from secagg_dp.errors import PrivacyBudgetExceeded
    led = PrivacyLedger("add-remove", path=sys.argv[1], epsilon_budget=float(sys.argv[2]), delta=1e-5)
    ev = Gaussian(20.0, 1.0, "add-remove")
    accepted = 0
    for _ in range(100):
        try:
            led.spend(ev)
            accepted += 1
        except PrivacyBudgetExceeded:
            pass
    led.close()
    print(accepted)
    """
)


@pytest.mark.slow  # over 5 s: runs in CI, not in the quick loop
def test_processes_sharing_a_ledger_never_exceed_the_budget(tmp_path):
    # 3 processes x 100 spends against a budget that admits 150 events: before the one-transaction
    # check-and-insert, two processes together accepted 1.47x the budget.
    path = tmp_path / "procs.sqlite"
    _ledger_with_events(path, 0)  # create it before the writers start
    budget = _budget_for(150)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD_SPENDER, str(path), repr(budget)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    accepted = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        accepted.append(int(out.strip()))
    with PrivacyLedger("add-remove", path=path) as led:
        assert len(led.entries) == sum(accepted)  # every accepted spend is recorded
        assert led.epsilon(DELTA)[0] <= budget
    assert 149 <= sum(accepted) <= 150


def test_ledger_written_with_an_earlier_default_grid_reopens_with_its_own_orders(tmp_path):
    # the default grid gained fractional orders; a ledger written with the earlier integer grid must keep
    # opening (orders=None adopts the file's), and an explicit, different grid is still refused
    import numpy as np

    from secagg_dp.accounting import DEFAULT_ORDERS, Gaussian, PrivacyLedger
    from secagg_dp.errors import ParameterError

    old_grid = np.concatenate([np.arange(2, 257), [512, 1024]]).astype(float)
    path = tmp_path / "old.sqlite"
    first = PrivacyLedger("add-remove", old_grid, path=path)
    first.spend(Gaussian(2.0, 1.0, "add-remove"), 3)
    eps_before = first.epsilon(1e-5)[0]
    first.close()
    again = PrivacyLedger("add-remove", path=path)
    assert np.array_equal(again.orders, old_grid) and not np.array_equal(again.orders, DEFAULT_ORDERS)
    assert again.epsilon(1e-5)[0] == eps_before
    again.close()
    with pytest.raises(ParameterError, match="orders"):
        PrivacyLedger("add-remove", DEFAULT_ORDERS, path=path)


# -- creating a new ledger: atomic, private, never through a dangling link -------------------------------------

_CHILD_OPENER = textwrap.dedent(
    """
    import sys, time
    from secagg_dp.accounting import PrivacyLedger, Gaussian
    from secagg_dp.errors import LedgerError
    start = float(sys.argv[2])
    time.sleep(max(0.0, start - time.time()))  # every opener starts at the same instant
    failed = 0
    for path in sys.argv[3:]:
        try:
            with PrivacyLedger("add-remove", path=path) as led:
                led.spend(Gaussian(20.0, 1.0, "add-remove"))
        except LedgerError as exc:
            failed += 1
            print(exc, file=sys.stderr)
    print(failed)
    """
)


@pytest.mark.slow  # 6 processes x 8 paths: about 15 s on 2 shared cores
def test_processes_creating_the_same_new_ledger_at_once_all_open_it(tmp_path):
    # Before creation was atomic, 5 of 45 openers racing on new paths got "empty (0 bytes): not a privacy
    # ledger". Here 6 processes open each of 8 new paths at the same instant; each must open and spend once.
    import time

    paths = [str(tmp_path / f"new{i}.sqlite") for i in range(8)]
    start = time.time() + 3.0  # after every child has imported the library
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD_OPENER, "-", repr(start), *paths],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "0", err
    for path in paths:
        with PrivacyLedger("add-remove", path=path) as led:
            assert len(led.entries) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"new{i}.sqlite" for i in range(8))  # no temp files


def test_new_ledgers_and_backups_are_readable_by_their_owner_only(tmp_path):
    import os
    import stat

    old = os.umask(0)  # even with a permissive umask
    try:
        with PrivacyLedger("add-remove", path=tmp_path / "l.sqlite") as led:
            led.spend(EV)
            led.backup(tmp_path / "b.sqlite")
    finally:
        os.umask(old)
    for name in ("l.sqlite", "b.sqlite"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name


def test_dangling_symlink_is_refused_and_nothing_is_created(tmp_path):
    import os

    target = tmp_path / "elsewhere" / "target.sqlite"
    target.parent.mkdir()
    link = tmp_path / "ledger.sqlite"
    os.symlink(target, link)
    with pytest.raises(LedgerError, match="dangling symbolic link"):
        PrivacyLedger("add-remove", path=link)
    assert not target.exists() and list(target.parent.iterdir()) == []
    _ledger_with_events(target, 2)  # a link to an existing ledger opens that ledger
    with PrivacyLedger("add-remove", path=link) as led:
        assert len(led.entries) == 2


# -- edges: a read-only file, a FIFO at the path, a stored count that no longer matches its RDP row --------------


def _zeroed_count(path):
    # the count of event 2 set to 0: the row's RDP (one spend) no longer matches; eps would silently shrink
    _ledger_with_events(path)
    _sql(path, "UPDATE events SET count = 0 WHERE seq = 2")


def _raised_count(path):
    _ledger_with_events(path)
    _sql(path, "UPDATE events SET count = 7 WHERE seq = 1")


def _zeroed_count_and_rdp(path):
    # count 0 and the row blanked to null: the recomputation for count 0 is a row of zeros, not null
    _ledger_with_events(path)
    _sql(path, "UPDATE events SET count = 0, rdp = 'null' WHERE seq = 3")


@pytest.mark.parametrize("damage", [_zeroed_count, _raised_count, _zeroed_count_and_rdp], ids=lambda f: f.__name__)
def test_count_not_matching_the_stored_rdp_row_is_refused_naming_the_row(tmp_path, damage):
    path = tmp_path / "ledger.sqlite"
    damage(path)
    before = path.read_bytes()
    seq = {"_zeroed_count": 2, "_raised_count": 1, "_zeroed_count_and_rdp": 3}[damage.__name__]
    for kw in ({}, {"read_only": True}):
        with pytest.raises(LedgerError, match=rf"event {seq}: .*does not match") as info:
            PrivacyLedger("add-remove", path=path, **kw)
        assert "ledger.sqlite" in str(info.value)
    assert path.read_bytes() == before


def test_count_changed_by_another_process_is_refused_on_refresh(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with PrivacyLedger("add-remove", path=path) as led:
        led.spend(EV, 3)
        with PrivacyLedger("add-remove", path=path) as other:
            other.spend(EV, 2)
        _sql(path, "UPDATE events SET count = 0 WHERE seq = 2")
        with pytest.raises(LedgerError, match="event 2"):
            led.epsilon(DELTA)


def test_row_check_recomputes_each_distinct_event_once(tmp_path, monkeypatch):
    # opening stays fast for large ledgers: one RDP evaluation per distinct stored event, not per row
    path = tmp_path / "ledger.sqlite"
    other = Gaussian(7.0, 1.0, "add-remove")
    with PrivacyLedger("add-remove", path=path) as led:
        for i in range(40):
            led.spend(EV if i % 2 else other, 1 + i % 3)
    calls = []
    real = Gaussian.rdp

    def counting(self, orders):
        calls.append(self.sigma)
        return real(self, orders)

    monkeypatch.setattr(Gaussian, "rdp", counting)
    with PrivacyLedger("add-remove", path=path, accountant=RdpAccountant("add-remove")) as led:
        assert len(led.entries) == 40
    # 40 compositions by the accountant + one check evaluation per distinct event (2), not one per row
    assert len(calls) == 40 + 2 and sorted(set(calls)) == [7.0, 20.0]


def _readonly_connections(monkeypatch, path) -> None:
    """Make SQLite open ``path`` read-only, as it does by itself when the OS refuses to open the file for
    writing (a 0444 file for a non-root user). Root ignores file modes, so under root (as in CI) a chmod
    alone never makes the ledger read-only; the SQLite read-only open mode reproduces the same failure."""
    import os
    import pathlib

    real = sqlite3.connect
    target = os.path.realpath(path)

    def connect(database, *args, **kwargs):
        if isinstance(database, (str, os.PathLike)) and os.path.realpath(database) == target:
            kwargs["uri"] = True
            return real(f"{pathlib.Path(target).as_uri()}?mode=ro", *args, **kwargs)
        return real(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)


def test_spend_on_a_read_only_file_raises_ledger_error_and_charges_nothing(tmp_path, monkeypatch):
    import os

    path = tmp_path / "ledger.sqlite"
    _ledger_with_events(path, 2)
    os.chmod(path, 0o444)
    if os.geteuid() == 0:  # root writes through 0444: open it the way SQLite opens it for any other user
        _readonly_connections(monkeypatch, path)
    before = path.read_bytes()
    with PrivacyLedger("add-remove", path=path) as led:  # opening to look is fine
        eps = led.epsilon(DELTA)
        with pytest.raises(LedgerError, match="read-only") as info:
            led.spend(EV)
        assert "ledger.sqlite" in str(info.value) and not isinstance(info.value, sqlite3.Error)
        assert len(led.entries) == 2 and led.epsilon(DELTA) == eps  # nothing charged in memory
    assert path.read_bytes() == before  # nor in the file
    monkeypatch.undo()
    os.chmod(path, 0o600)
    with PrivacyLedger("add-remove", path=path) as led:
        assert len(led.entries) == 2


def test_fifo_at_the_ledger_path_is_refused_without_blocking(tmp_path):
    import os
    import threading

    path = tmp_path / "ledger.sqlite"
    os.mkfifo(path)
    outcome: list[BaseException | None] = []

    def open_it(**kw):
        try:
            PrivacyLedger("add-remove", path=path, **kw)
            outcome.append(None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    for kw in ({}, {"read_only": True}):
        outcome.clear()
        worker = threading.Thread(target=open_it, kwargs=kw, daemon=True)
        worker.start()
        worker.join(timeout=10.0)
        if worker.is_alive():  # it blocked in open(): release it by opening the write end, then fail
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            worker.join(timeout=10.0)
            pytest.fail("opening a ledger at a FIFO blocked")
        assert isinstance(outcome[0], LedgerError), outcome
        assert "not a regular file" in str(outcome[0]) and "FIFO" in str(outcome[0])
    assert os.path.exists(path) and not path.is_file()  # left as it was
