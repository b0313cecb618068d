"""A worker stopped while it holds a local store's lock is killed at once.

SQLite serializes writers with POSIX byte-range locks on the database file (rollback
journal: `mlflow.db`) or on its `-shm` index (WAL: `optuna.db`). A worker stopped
(SIGSTOP, a debugger) in the middle of one of its writes keeps that lock for as long as
it stays stopped, and every other process then waits on it: other workers' writes fail
after their busy timeout (MLflow 20 s, Optuna 120 s) and the coordinator's own reads
block, long before the grace period (60 s by default) lets `study.stalls` retry the
trial. Seen in CI: replacement workers started one after another, each failing its
trial with "database is locked".

The coordinator therefore watches, from a thread of its own (its main loop may be the
one blocked), which of its worker processes hold such a lock while stopped: a stopped
process never releases it, so killing it (the kernel drops its locks, SQLite rolls
back the half-done transaction) is the only way on. Its claim lapses after the grace
period and the slot is retried, as for any dead worker. A lock that merely blocks
readers in WAL mode (the shared "DMS" lock every open connection holds on `-shm`, a
read lock on the database file) is not a reason: such a stopped worker is left to
`study.stalls` and the fence (`study.trial_run`), so it can still wake up harmlessly.

Linux only (`/proc/locks`); elsewhere nothing is killed. Servers (PostgreSQL) are not
concerned: there a stopped client's open transaction is ended by the server
(`idle_in_transaction_session_timeout`, `study.storage`).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

PROC_LOCKS = Path("/proc/locks")
WATCH_S = 0.5  # well under MLflow's 20 s busy timeout, the shortest a blocked writer waits
STOPPED = {psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP}


@dataclass(frozen=True)
class HeldLock:
    pid: int
    kind: str  # "READ" or "WRITE"
    file: Path  # the store file the lock is on


def _identity(path: Path) -> tuple[int, int, int] | None:
    """(major, minor, inode) of a file, as /proc/locks names it; None when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino


def held_locks(files: list[Path], text: str | None = None) -> list[HeldLock]:
    """The POSIX locks held (not waited for) on `files`, from /proc/locks (or `text`)."""
    ids = {ident: f for f in files if (ident := _identity(f)) is not None}
    if text is None:
        try:
            text = PROC_LOCKS.read_text()
        except OSError:
            return []
    held = []
    for line in text.splitlines():
        fields = line.split()
        # "12: POSIX  ADVISORY  WRITE 4242 00:2f:1311 1073741824 1073741825"; "12: -> POSIX ..." waits
        if len(fields) < 6 or fields[1] != "POSIX":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            ident = (int(major, 16), int(minor, 16), int(inode))
            pid = int(fields[4])
        except ValueError:
            continue
        if ident in ids:
            held.append(HeldLock(pid, fields[3], ids[ident]))
    return held


def blocking(lock: HeldLock) -> bool:
    """Whether a stopped holder of `lock` keeps other processes from writing: any write
    lock; a read lock on a database in rollback-journal mode (no `-shm` beside it)."""
    if lock.kind == "WRITE":
        return True
    return not lock.file.name.endswith("-shm") and not Path(f"{lock.file}-shm").exists()


def store_files(databases: list[Path]) -> list[Path]:
    return [f for db in databases for f in (db, Path(f"{db}-shm"))]


def stopped_lock_holders(databases: list[Path], pids: set[int], text: str | None = None) -> dict[int, Path]:
    """pid -> the store file it blocks, for the processes among `pids` that are stopped
    while holding a blocking lock on one of `databases`."""
    found: dict[int, Path] = {}
    for lock in held_locks(store_files(databases), text):
        if lock.pid in pids and lock.pid not in found and blocking(lock):
            try:
                if psutil.Process(lock.pid).status() in STOPPED:
                    found[lock.pid] = Path(str(lock.file).removesuffix("-shm"))
            except psutil.NoSuchProcess:
                continue
    return found


class LockWatchdog:
    """A daemon thread that kills the coordinator's workers found stopped while holding a
    local store's lock; `killed` maps their pids to the database they blocked. The
    processes are not reaped here: the coordinator reaps them when the study ends, so an
    operator's later SIGCONT still finds the pid."""

    def __init__(
        self,
        databases: list[Path | None],
        pids: Callable[[], Iterable[int]],
        on_kill: Callable[[int, Path], object],
    ) -> None:
        self.databases = [db for db in databases if db is not None]  # None: a server store
        self.pids = pids  # a callable: the pids of the live workers now
        self.on_kill = on_kill
        self.killed: dict[int, Path] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="store-lock-watchdog", daemon=True)

    def __enter__(self) -> LockWatchdog:
        if self.databases and PROC_LOCKS.exists():
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_S):
            pids = set(self.pids()) - set(self.killed)
            for pid, db in stopped_lock_holders(self.databases, pids).items():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                self.killed[pid] = db
                self.on_kill(pid, db)
