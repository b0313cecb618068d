"""The Optuna storage every worker of a study shares (SQLite by default, any RDB URL).

SQLite is the laptop default: `sqlite:///<cwd>/mlruns/optuna.db`. Several local
processes write to it, so it runs in WAL mode with a long busy timeout. Its
transactions are not enough to claim a trial safely: pysqlite starts a transaction
only at the UPDATE, so two processes can both read a trial as WAITING and both set
it RUNNING. Claims are therefore serialized by an OS file lock next to the database
(`<db>.lock`); on PostgreSQL/MySQL, Optuna's `SELECT ... FOR UPDATE` already makes
the WAITING -> RUNNING change atomic, and several machines can share one server.

Liveness: Optuna's RDB heartbeat (`heartbeat_interval`, `grace_period`); a RUNNING
trial whose heartbeat is older than the grace period belonged to a dead worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.config import ConfigError

SQLITE_TIMEOUT_S = 120


def default_storage_url(root: Path | None = None) -> str:
    root = Path.cwd() if root is None else Path(root)
    return f"sqlite:///{(root / 'mlruns' / 'optuna.db').resolve()}"


def sqlite_path(url: str) -> Path | None:
    """The database file of a `sqlite:///` URL, None for other databases."""
    if not url.startswith("sqlite:"):
        return None
    path = url.split(":///", 1)[1] if ":///" in url else ""
    if not path or path == ":memory:":
        raise ConfigError("--storage", f"{url!r} is not a file database; workers cannot share it.")
    return Path(path)


@dataclass(frozen=True)
class StorageSettings:
    url: str
    heartbeat_interval: int = 10  # seconds between heartbeats of a running trial
    grace_period: int = 60  # a RUNNING trial silent this long is stale (its worker died)


def quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")


def open_storage(settings: StorageSettings):
    """An RDBStorage with heartbeat; creates the SQLite file (call after validation)."""
    import optuna

    quiet_optuna()
    engine_kwargs = {}
    db = sqlite_path(settings.url)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(db, timeout=SQLITE_TIMEOUT_S)) as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # persistent: readers never block the writer
        engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    try:
        return optuna.storages.RDBStorage(
            settings.url,
            engine_kwargs=engine_kwargs,
            heartbeat_interval=settings.heartbeat_interval,
            grace_period=settings.grace_period,
        )
    except (ImportError, ValueError) as err:
        raise ConfigError("--storage", f"cannot open {settings.url!r}: {err}") from None


@contextlib.contextmanager
def claim_lock(url: str) -> Iterator[None]:
    """Serialize trial claims among local processes sharing one SQLite file."""
    db = sqlite_path(url)
    if db is None:
        yield
        return
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
