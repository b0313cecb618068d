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

A server storage is checked when opened: a missing driver names the extra to install,
an unreachable server or refused login is one line (password hidden), tried a few
times over ~10 s first so a server still starting is waited for; the dry run reads
through the same checks (`open_for_reading`). The URL this module is given carries no
password: it is put back only to connect (tracking.credentials). A SQLite file is
created 0600, its tables under a lock (two studies started together on an empty
folder), and a damaged one is refused before it is touched (tracking.local_store).
Pooled connections are pinged before use, so a database server that restarted between two queries of a
long trial costs nothing. A server that goes away mid-study is waited for: every
storage call retries for up to `StorageSettings.outage_s` (`--outage-wait`, 120 s by
default), saying so once on stderr; past that the worker stops with one `error:
--storage:` line (its trial, which it cannot write, goes stale and is retried). Nothing is lost either way: a trial
whose result could not be recorded keeps it in its run folder, and the rerun study
records it without training it again.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sqlite3
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cem_ablate.config import ConfigError
from cem_ablate.study.optuna_storage import check_private_api, wrapped_rdb_storage
from cem_ablate.tracking.credentials import with_password
from cem_ablate.tracking.local_store import check_readable, create_store_file, creation_lock, make_private
from cem_ablate.tracking.store import shown_url

if TYPE_CHECKING:
    from optuna.storages import RDBStorage

_Storage = TypeVar("_Storage", bound="RDBStorage")

SQLITE_TIMEOUT_S = 120
CONNECT_TIMEOUT_S = 5  # per attempt, for server databases
# A client stopped mid-transaction (SIGSTOP, a frozen machine) would hold its row locks
# forever; the server ends such a session after this long (study.store_locks is SQLite's).
IDLE_IN_TRANSACTION_MS = 60_000
CONNECT_ATTEMPTS = 3  # a server that is still starting gets ~10 s
SCHEMA_ATTEMPTS = 4  # opening a fresh database from several machines at once
OUTAGE_S = 120  # how long a database server that went away is waited for, by default (--outage-wait)
OUTAGE_RETRY_S = 2.0
# SQLAlchemy 2.x dialect -> (module it imports, what to install)
DRIVERS = {
    "postgresql": ("psycopg", "pip install 'cem-ablate[postgres]'"),
    "postgresql+psycopg": ("psycopg", "pip install 'cem-ablate[postgres]'"),
    "postgresql+psycopg2": (
        "psycopg2",
        "pip install psycopg2-binary, or use postgresql:// with pip install 'cem-ablate[postgres]'",
    ),
    "mysql": ("MySQLdb", "pip install mysqlclient"),
    "mysql+pymysql": ("pymysql", "pip install pymysql"),
}


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
    outage_s: int = OUTAGE_S  # how long a database server that went away is waited for (--outage-wait)


def quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")


def check_driver(url: str) -> None:
    """The database driver of a server URL is importable, else say what to install."""
    scheme = url.split(":", 1)[0].lower()
    module, install = DRIVERS.get(scheme, (None, None))
    if module is None:
        return
    try:
        importlib.import_module(module)
    except ImportError:
        raise ConfigError("--storage", f"{scheme}:// needs the {module!r} driver: {install}") from None


def _engine_kwargs(url: str) -> dict:
    kwargs: dict = {"pool_pre_ping": True}  # a connection the server dropped is replaced, not an error
    if url.startswith(("postgresql", "mysql")):
        kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    if url.startswith("postgresql"):
        kwargs["connect_args"]["options"] = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
    return kwargs


def check_server(url: str, attempts: int = CONNECT_ATTEMPTS, wait_s: float = 2.0) -> None:
    """Connect once (a few tries) to a server database: one line when it cannot."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(with_password(url), **_engine_kwargs(url))
    try:
        for attempt in range(attempts):
            try:
                with engine.connect():
                    return
            except sqlalchemy.exc.OperationalError as err:
                if attempt + 1 == attempts or "authentication failed" in str(err.orig):
                    raise ConfigError(
                        "--storage",
                        f"cannot connect to {shown_url(url)}: "
                        f"{_first_line(err.orig)} (start the database server, or "
                        "check the host, port, user and password of --storage)",
                    ) from None
                time.sleep(wait_s)
    finally:
        engine.dispose()


def _first_line(err: BaseException | None) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def open_storage(settings: StorageSettings) -> RDBStorage:
    """An RDBStorage with heartbeat; creates the SQLite file (call after validation)."""
    import optuna

    quiet_optuna()
    check_private_api()
    db = sqlite_path(settings.url)
    if db is not None:
        check_readable(db, "--storage", "Optuna")
        with creation_lock(db):  # Optuna creates its tables check-then-create: one process at a time
            create_store_file(db)
            make_private(db)
            with contextlib.closing(sqlite3.connect(db, timeout=SQLITE_TIMEOUT_S)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")  # persistent: readers never block the writer
            return _open_schema(optuna.storages.RDBStorage, settings, {"connect_args": {"timeout": SQLITE_TIMEOUT_S}})
    check_driver(settings.url)
    check_server(settings.url)
    storage = _open_schema(outage_tolerant_storage(), settings, _engine_kwargs(settings.url))
    storage.outage_s = settings.outage_s
    return storage


def close_storage(storage: RDBStorage) -> None:
    """Close the storage's pooled connections: a SQLite file's WAL sidecars (-wal, -shm)
    go with the last one, rather than staying beside the file until the process exits."""
    storage.engine.dispose()


def _open_schema(
    storage_class: Callable[..., _Storage], settings: StorageSettings, engine_kwargs: dict[str, Any]
) -> _Storage:
    import sqlalchemy

    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            return storage_class(
                with_password(settings.url),
                engine_kwargs=engine_kwargs,
                heartbeat_interval=settings.heartbeat_interval,
                grace_period=settings.grace_period,
            )
        except (ImportError, ValueError) as err:
            raise ConfigError("--storage", f"cannot open {shown_url(settings.url)}: {_first_line(err)}") from None
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            # Machines opening a fresh database at once race to create Optuna's tables
            # (PostgreSQL: UniqueViolation on pg_type); the loser finds them made.
            if attempt + 1 == SCHEMA_ATTEMPTS:
                raise
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def open_for_reading(url: str) -> Iterator[RDBStorage | None]:
    """The storage for a look that writes nothing (the dry run), through the same checks
    as `open_storage`: None when its SQLite file does not exist yet (nothing to read).
    Its engine is disposed on leaving, so a SQLite file's WAL sidecars (-wal, -shm) go
    with the last connection instead of staying beside the user's file while this
    process lives."""
    import optuna

    db = sqlite_path(url)
    if db is not None:
        if not db.exists():
            yield None
            return
        check_readable(db, "--storage", "Optuna")
    else:
        check_driver(url)
        check_server(url, attempts=1)
    quiet_optuna()
    storage = optuna.storages.RDBStorage(with_password(url))
    try:
        yield storage
    finally:
        close_storage(storage)


def _waits_out_outages(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        import sqlalchemy

        first_failure: float | None = None
        while True:
            try:
                result = method(self, *args, **kwargs)
            except Exception as raised:
                # Connection refused / dropped / timed out, bare or as Optuna wraps it
                # (StorageInternalError from the OperationalError).
                err = raised if isinstance(raised, sqlalchemy.exc.OperationalError) else raised.__cause__
                if not isinstance(err, sqlalchemy.exc.OperationalError):
                    raise
                now = time.monotonic()
                window = getattr(self, "outage_s", OUTAGE_S)
                if first_failure is None:
                    first_failure = now
                    print(
                        f"storage {shown_url(self.url)} unreachable ({_first_line(err.orig)}); "
                        f"retrying for up to {window} s",
                        file=sys.stderr,
                        flush=True,
                    )
                if now - first_failure >= window:
                    raise ConfigError(
                        "--storage",
                        f"lost {shown_url(self.url)} for {window} s ({name}, --outage-wait): {_first_line(err.orig)}",
                    ) from None
                time.sleep(OUTAGE_RETRY_S)
                continue
            if first_failure is not None:
                print(
                    f"storage {shown_url(self.url)} reachable again after {time.monotonic() - first_failure:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
            return result

    return call


@functools.cache
def outage_tolerant_storage() -> type:
    """RDBStorage whose public methods wait out a database server outage (`outage_s`), and
    the private ones Optuna's cache and heartbeat call directly (study.optuna_storage).

    A retried write may repeat one the server committed just before the connection
    broke; Optuna's own checks turn that into "already finished" / "not claimed",
    which the study treats like a lost race (the trial is retried, never trained twice).
    """
    return wrapped_rdb_storage("OutageTolerantRDBStorage", _waits_out_outages)


@contextlib.contextmanager
def claim_lock(url: str) -> Iterator[None]:
    """Serialize trial claims among local processes sharing one SQLite file."""
    db = sqlite_path(url)
    if db is None:
        yield
        return
    with creation_lock(db):  # the same <db>.lock as store creation: one lock file, one owner
        yield
