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
times over ~10 s first so a server still starting is waited for. Pooled connections
are pinged before use, so a database server that restarted between two queries of a
long trial costs nothing; one that is down when a worker writes stops that worker
(its trial goes stale and is retried; a finished run's result in its run folder is
picked up again, not retrained).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.config import ConfigError

SQLITE_TIMEOUT_S = 120
CONNECT_TIMEOUT_S = 5  # per attempt, for server databases
CONNECT_ATTEMPTS = 3  # a server that is still starting gets ~10 s
SCHEMA_ATTEMPTS = 4  # opening a fresh database from several machines at once
# SQLAlchemy 2.x dialect -> (module it imports, what to install)
DRIVERS = {
    "postgresql": ("psycopg", "pip install 'cem-ablate[postgres]'"),
    "postgresql+psycopg": ("psycopg", "pip install 'cem-ablate[postgres]'"),
    "postgresql+psycopg2": ("psycopg2", "pip install psycopg2-binary, or use postgresql:// with "
                                        "pip install 'cem-ablate[postgres]'"),
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


def quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")


def shown_url(url: str) -> str:
    """The URL with its password masked, for messages and logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not parseable: show nothing secret
        return url.split("@")[-1]


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
    return kwargs


def check_server(url: str, attempts: int = CONNECT_ATTEMPTS, wait_s: float = 2.0) -> None:
    """Connect once (a few tries) to a server database: one line when it cannot."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, **_engine_kwargs(url))
    try:
        for attempt in range(attempts):
            try:
                with engine.connect():
                    return
            except sqlalchemy.exc.OperationalError as err:
                if attempt + 1 == attempts or "authentication failed" in str(err.orig):
                    raise ConfigError("--storage", f"cannot connect to {shown_url(url)}: "
                                                   f"{_first_line(err.orig)}") from None
                time.sleep(wait_s)
    finally:
        engine.dispose()


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


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
    else:
        check_driver(settings.url)
        check_server(settings.url)
        engine_kwargs = _engine_kwargs(settings.url)
    import sqlalchemy

    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(
                settings.url,
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


def check_tracking_server(uri: str, attempts: int = CONNECT_ATTEMPTS, wait_s: float = 2.0) -> None:
    """An http(s) MLflow tracking server answers `/health`, else one line.

    Checked up front because MLflow's client retries a dead server for ~4 minutes
    (MLFLOW_HTTP_REQUEST_MAX_RETRIES with backoff) before its first error.
    """
    import urllib.error
    import urllib.request

    if not uri.startswith(("http://", "https://")):
        return
    shown = shown_url(uri)
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=CONNECT_TIMEOUT_S) as response:
                if response.status == 200:
                    return
                problem = f"HTTP {response.status} on /health"
        except urllib.error.HTTPError as err:
            problem = f"HTTP {err.code} on /health: not an MLflow server?"
            break
        except OSError as err:
            problem = str(getattr(err, "reason", err))
        if attempt + 1 < attempts:
            time.sleep(wait_s)
    raise ConfigError("--tracking-uri", f"cannot reach the MLflow server {shown}: {problem}")
