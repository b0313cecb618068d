"""The local SQLite stores (`mlruns/mlflow.db`, `mlruns/optuna.db`) and the files beside
them: private, created once under a lock, and refused with one line when damaged.

- Private: a study writes its stores, artifacts, run folders, logs and worker payload with the
  user's permissions only (`private_files`: umask 077, so files 0600 and folders 0700;
  they hold configurations, user names and paths), and a store file made by an older
  version is narrowed to 0600 when opened (`make_private`).
- Created under a lock: two `cem-ablate study` started together on an empty folder both
  find no tables and both run MLflow's schema migration, and the second fails in it
  (`table webhooks already exists`, `duplicate column name: step`); SQLite's own
  locking does not cover alembic's check-then-create. `creation_lock(db)` is an OS
  file lock (`<db>.lock`) held while a store is opened the first time in a process.
- Damaged: a truncated or overwritten file is found before anything reads or writes
  it (`check_readable`: SQLite's `quick_check`, read-only), instead of an 80-line
  traceback from deep inside MLflow or Optuna naming no file. The file is left as it
  is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from cem_ablate.config import ConfigError

PRIVATE_UMASK = 0o077


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Everything this process (and the processes it starts) creates inside is readable
    by the user only."""
    previous = os.umask(PRIVATE_UMASK)
    os.umask(previous | PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def create_store_file(db: Path) -> None:
    """Create an absent store file, 0600. An existing one is never opened here: closing any file
    descriptor of a file drops every POSIX lock this process holds on it, SQLite's own included.
    A second store open in a process with live connections (a transfer's phase 2, a worker's next
    trial) then let another process take the database for unused, checkpoint it and delete its
    WAL and shared memory under this process's connections: their reads stayed on the old snapshot
    (a finished trial still queued) or failed as "database disk image is malformed"."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(db, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))


def make_private(db: Path) -> None:
    """Narrow an existing store file (and SQLite's journal files) to 0600."""
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-journal")):
        with contextlib.suppress(OSError):  # absent, or not ours to change: nothing to narrow
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)


@contextlib.contextmanager
def creation_lock(db: Path) -> Iterator[None]:
    """Hold `<db>.lock` (an OS lock, released when the process dies): one process at a
    time creates or migrates the store's schema."""
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


_CHECKED: set[Path] = set()  # once per process: quick_check reads the whole file (seconds for a large store)


def check_readable(db: Path, option: str, what: str) -> None:
    """A present store file is a SQLite database SQLite can read through, else one line
    naming it and what to do. Read-only: a damaged file is not touched."""
    if db in _CHECKED or not db.exists() or db.stat().st_size == 0:
        return  # checked already, or created on first use
    problem = None
    try:
        with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=120)) as conn:
            rows = conn.execute("PRAGMA quick_check(1)").fetchall()
            if rows != [("ok",)]:
                problem = str(rows[0][0]) if rows else "quick_check found nothing"
    except sqlite3.DatabaseError as err:  # "file is not a database", "database disk image is malformed"
        if "locked" in str(err):
            return  # busy, not damaged: the store's own timeout handles it
        problem = str(err)
    if problem is not None:
        raise ConfigError(option, damaged_message(db, what, problem))
    _CHECKED.add(db)


def damaged_message(db: Path, what: str, problem: str) -> str:
    return (
        f"{db} is not a readable {what} database ({problem}); nothing was written to it. "
        f"Restore it from a backup, or move it aside (mv {db} {db}.damaged) to start an empty one"
    )
