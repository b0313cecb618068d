"""A process stopped while it holds a SQLite store's lock is found and killed; one that
only holds what every open connection holds is left alone (study.store_locks).

Real SQLite processes, real SIGSTOP, the kernel's /proc/locks."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from cem_ablate.study.store_locks import STOPPED, HeldLock, LockWatchdog, blocking, held_locks, stopped_lock_holders

pytestmark = pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")

HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    db, mode, action = sys.argv[1:]
    conn = sqlite3.connect(db, isolation_level=None, timeout=0.1)
    conn.execute(f"PRAGMA journal_mode={mode}")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
    if action == "write":
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (1)")  # the transaction stays open
    elif action == "read":
        conn.execute("BEGIN")
        conn.execute("SELECT * FROM t").fetchall()  # a read transaction stays open
    else:
        conn.execute("SELECT * FROM t").fetchall()  # an idle connection
    print("ready", flush=True)
    time.sleep(600)
""")


def _holder(db: Path, mode: str, action: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), mode, action], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc: subprocess.Popen) -> None:
    """SIGSTOP, then wait until the kernel shows the process stopped (on a loaded machine
    the signal takes effect only when the process is next scheduled)."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 60
    while psutil.Process(proc.pid).status() not in STOPPED:
        assert time.monotonic() < deadline, "SIGSTOP never took effect"
        time.sleep(0.01)


def _can_write(db: Path) -> bool:
    try:
        with sqlite3.connect(db, timeout=0.2) as conn:
            conn.execute("INSERT INTO t VALUES (2)")
        return True
    except sqlite3.OperationalError as err:
        assert "locked" in str(err)
        return False


@pytest.fixture
def holders():
    started = []
    yield lambda *a: started.append(_holder(*a)) or started[-1]
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()


def test_proc_locks_lines_are_read_by_file_identity(tmp_path):
    db = tmp_path / "x.db"
    db.write_bytes(b"")
    st = os.stat(db)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    text = (
        f"1: POSIX  ADVISORY  WRITE 4242 {dev} 1073741824 1073741825\n"
        f"1: -> POSIX  ADVISORY  WRITE 4343 {dev} 1073741824 1073741825\n"  # waits: holds nothing
        f"2: FLOCK  ADVISORY  WRITE 4444 {dev} 0 EOF\n"  # not SQLite's kind of lock
        f"3: POSIX  ADVISORY  READ 4545 00:00:{st.st_ino + 1} 0 EOF\n"
    )  # another file
    assert held_locks([db], text) == [HeldLock(4242, "WRITE", db)]


def test_which_locks_block_other_writers(tmp_path):
    db = tmp_path / "x.db"
    db.write_bytes(b"")
    assert blocking(HeldLock(1, "WRITE", db))
    assert blocking(HeldLock(1, "READ", db))  # rollback journal: a reader keeps writers from committing
    Path(f"{db}-shm").write_bytes(b"")
    assert not blocking(HeldLock(1, "READ", db))  # WAL: readers never block the writer
    assert not blocking(HeldLock(1, "READ", Path(f"{db}-shm")))
    assert blocking(HeldLock(1, "WRITE", Path(f"{db}-shm")))


@pytest.mark.parametrize("mode,action", [("DELETE", "write"), ("DELETE", "read"), ("WAL", "write")])
def test_a_stopped_writer_is_found_and_killing_it_frees_the_store(tmp_path, holders, mode, action):
    db = tmp_path / "store.db"
    proc = holders(db, mode, action)
    assert not _can_write(db)
    assert stopped_lock_holders([db], {proc.pid}) == {}  # running: it may finish its transaction
    _stop(proc)
    assert stopped_lock_holders([db], {proc.pid}) == {proc.pid: db}
    assert stopped_lock_holders([db], {proc.pid + 1}) == {}  # not one of ours
    killed, kill_seen = [], threading.Event()

    def on_kill(pid, file):
        killed.append((pid, file))
        kill_seen.set()

    with LockWatchdog([db], lambda: [proc.pid], on_kill) as watchdog:
        kill_seen.wait(timeout=60)
    assert killed == [(proc.pid, db)] and watchdog.killed == {proc.pid: db}
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert _can_write(db)  # SQLite rolled the half-done transaction back


@pytest.mark.parametrize("action", ["idle", "read"])
def test_a_stopped_wal_reader_is_left_to_the_fence(tmp_path, holders, action):
    db = tmp_path / "store.db"
    proc = holders(db, "WAL", action)
    _stop(proc)
    assert any(lock.pid == proc.pid for lock in held_locks([db, Path(f"{db}-shm")]))  # it does hold locks
    assert stopped_lock_holders([db], {proc.pid}) == {}
    assert _can_write(db)
    assert proc.poll() is None


def _own_locks(db: Path) -> set[str]:
    return {lock.kind for lock in held_locks([db]) if lock.pid == os.getpid()}


def test_opening_a_store_again_keeps_the_locks_of_its_live_connections(tmp_path):
    """Closing any descriptor of a file drops every POSIX lock the process holds on it. The
    store openers once opened and closed the database file on every call: a transfer's phase 2
    (a second open in the coordinator) lost the shared lock its live WAL connections hold, a
    worker's last close then took the database for unused and deleted its WAL, and the
    coordinator kept reading the old snapshot (a finished trial still queued) or got "database
    disk image is malformed". Both stores, opened twice with a connection live in between."""
    from cem_ablate.study.storage import StorageSettings, open_storage
    from cem_ablate.tracking.store import make_client

    optuna_db = tmp_path / "optuna.db"
    first = open_storage(StorageSettings(f"sqlite:///{optuna_db}"))
    first.get_all_studies()  # a pooled WAL connection: it holds a shared lock on the file
    assert "READ" in _own_locks(optuna_db)
    open_storage(StorageSettings(f"sqlite:///{optuna_db}"))
    assert "READ" in _own_locks(optuna_db)

    mlflow_db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{mlflow_db}"
    live = sqlite3.connect(mlflow_db)  # the same SQLite library as MLflow's engine
    make_client(uri)
    live.execute("PRAGMA journal_mode=WAL")
    live.execute("BEGIN")
    live.execute("SELECT count(*) FROM experiments").fetchall()  # a read transaction: a shared lock
    held = _own_locks(mlflow_db)
    make_client(uri)
    assert held and _own_locks(mlflow_db) == held
    live.rollback()
    live.close()
