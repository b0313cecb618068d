"""Where runs are stored: the default local store, environment, clients.

Default store: `sqlite:///<cwd>/mlruns/mlflow.db`, artifacts under `mlruns/`
(MLflow 3 refuses the plain `./mlruns` file store). Any tracking URI works,
e.g. `http://host:5000` for a tracking server. Every caller passes a URI explicitly:
Lightning's MLFlowLogger would otherwise fall back to `file:./mlruns`.

A URI handed around here carries no password (tracking.credentials): a tracking server
with authentication (`mlflow server --app-name basic-auth`) gets MLflow's own
`MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD`. The local SQLite store is
created 0600, its schema under a lock, and refused with one line when its file is
damaged (tracking.local_store).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path

from cem_ablate.config import ConfigError
from cem_ablate.tracking.credentials import basic_auth_header, is_http, with_password
from cem_ablate.tracking.local_store import (
    check_readable,
    create_store_file,
    creation_lock,
    damaged_message,
    make_private,
)

SERVER_TIMEOUT_S = 5  # per attempt
SERVER_ATTEMPTS = 3  # a server still starting gets ~10 s
# MLflow's client retries a request that finds no server with exponential backoff
# (urllib3: no wait after the first failure, then factor x 2^(k-1) s, each wait at most
# 120 s; MLflow allows at most 10 retries): the retry window a study sets from
# --outage-wait, unless the environment already says (MLFLOW_HTTP_REQUEST_MAX_RETRIES,
# MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR: MLflow's own settings win).
MLFLOW_RETRIES_VAR, MLFLOW_BACKOFF_VAR = "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"
_MAX_RETRIES, _MAX_WAIT_S, _BACKOFF = 10, 120, 2


class TrackingServerLost(ConfigError):
    """The MLflow server stayed away longer than the client's retry window."""

    def __init__(self, uri: str, window_s: float, error: str):
        super().__init__(
            "--tracking-uri",
            f"lost the MLflow server {shown_url(uri)} for more than {window_s:.0f} s (--outage-wait): {error}",
        )


def default_tracking_uri(root: Path | None = None) -> str:
    root = Path.cwd() if root is None else Path(root)
    return f"sqlite:///{(root / 'mlruns' / 'mlflow.db').resolve()}"


def sqlite_store_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    return None


def default_artifact_root(uri: str) -> Path | None:
    """Artifacts of a local SQLite store live next to the database (`mlruns/`)."""
    db = sqlite_store_path(uri)
    return db.parent if db is not None else None


def quiet_mlflow() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # the report reads stats.json per variant
    warnings.filterwarnings("ignore", message=".*noload.*")
    warnings.filterwarnings("ignore", category=FutureWarning, module="mlflow")
    # MLflow logs every database error with its traceback before raising it: the raised
    # error is what the study reports (a full disk: one line, tracking.disk_space).
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def make_client(uri: str):
    """An MlflowClient on `uri`; a local store is created here (call after validation):
    its file 0600, its schema by one process at a time, a damaged file refused."""
    quiet_mlflow()
    from mlflow import MlflowClient  # configures mlflow's loggers on first import: quiet them after

    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    db = sqlite_store_path(uri)
    if db is None:
        return MlflowClient(tracking_uri=with_password(uri))
    check_readable(db, "--tracking-uri", "MLflow")
    with creation_lock(db):
        create_store_file(db)
        make_private(db)
        client = MlflowClient(tracking_uri=uri)
        _open_store(client, db)
    return client


def _open_store(client, db: Path) -> None:
    """Open the store now, under the caller's lock: MLflow creates or migrates its schema
    when a client first touches it (check-then-create, so two first launches collide)."""
    import sqlalchemy
    from mlflow.exceptions import MlflowException

    try:
        client.search_experiments(max_results=1)
    except (MlflowException, sqlalchemy.exc.DatabaseError) as err:
        text = str(err)
        if "file is not a database" in text or "malformed" in text:
            raise ConfigError("--tracking-uri", damaged_message(db, "MLflow", text.splitlines()[0][:200])) from None
        raise


def shown_url(url: str) -> str:
    """A store URL (MLflow server, Optuna database) with its password masked, for
    messages and logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not parseable: show nothing secret
        return url.split("@")[-1]


def check_tracking_server(uri: str, attempts: int = SERVER_ATTEMPTS, wait_s: float = 2.0) -> None:
    """An http(s) MLflow tracking server answers `/health`, else one line.

    Checked up front because MLflow's client retries a dead server for ~4 minutes
    (MLFLOW_HTTP_REQUEST_MAX_RETRIES with backoff) before its first error.
    """
    import urllib.error
    import urllib.request

    if not is_http(uri):
        return
    from cem_ablate.tracking.credentials import without_password

    uri = without_password(uri)  # a user:password@ in the URL: MLflow's own variables from here on
    shown = shown_url(uri)
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=SERVER_TIMEOUT_S) as response:
                if response.status == 200:
                    _check_login(uri)
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


def _check_login(uri: str) -> None:
    """The server accepts this process's credentials (none, or MLflow's basic-auth
    variables): a refused login is one line now, not MLflow's first failed call."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1", headers=basic_auth_header()
    )
    try:
        with urllib.request.urlopen(request, timeout=SERVER_TIMEOUT_S):
            return
    except urllib.error.HTTPError as err:
        if err.code not in (401, 403):
            return  # not a login problem: MLflow's client reports it with its own message
        who = "the credentials of MLFLOW_TRACKING_USERNAME" if basic_auth_header() else "a request without credentials"
        raise ConfigError(
            "--tracking-uri",
            f"the MLflow server {shown_url(uri)} refused {who} (HTTP {err.code}): "
            "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or give "
            "http://user:password@host:port",
        ) from None
    except OSError:
        return  # answered /health a moment ago: let MLflow's client retry


def mlflow_retry_window(retries: int, factor: float) -> float:
    """Seconds MLflow's client keeps retrying a request to a server that is away."""
    return float(sum(min(_MAX_WAIT_S, factor * 2 ** (k - 1)) for k in range(2, retries + 1)))


def mlflow_outage_window(env=None) -> float:
    """The retry window MLflow's client runs with in this environment."""
    env = os.environ if env is None else env
    return mlflow_retry_window(int(env.get(MLFLOW_RETRIES_VAR, 7)), float(env.get(MLFLOW_BACKOFF_VAR, _BACKOFF)))


def set_mlflow_outage_window(seconds: float, env=None) -> float:
    """Set MLflow's retries so a server away for `seconds` is waited out (the fewest
    retries whose window is at least that, the backoff factor raised past 10 of them),
    for this process and the workers it starts; MLflow's own variables, when set, win.
    The window in force."""
    env = os.environ if env is None else env
    if MLFLOW_RETRIES_VAR not in env and MLFLOW_BACKOFF_VAR not in env:
        retries = next(
            (n for n in range(2, _MAX_RETRIES + 1) if mlflow_retry_window(n, _BACKOFF) >= seconds), _MAX_RETRIES
        )
        factor = _BACKOFF
        while mlflow_retry_window(retries, factor) < seconds and factor < _MAX_WAIT_S:
            factor += 1
        env[MLFLOW_RETRIES_VAR], env[MLFLOW_BACKOFF_VAR] = str(retries), str(factor)
    return mlflow_outage_window(env)


def lost_tracking_server(err: BaseException, uri: str) -> TrackingServerLost | None:
    """The error of an MLflow call that found no server after its retries (on an http(s)
    tracking URI), as one line naming the server; None for any other error."""
    if isinstance(err, TrackingServerLost):
        return err
    if not is_http(uri):
        return None
    seen: BaseException | None = err
    while seen is not None:
        text = str(seen)
        if "Max retries exceeded" in text or type(seen).__name__ in ("ConnectionError", "MaxRetryError"):
            first = next((line.strip() for line in text.splitlines() if line.strip()), type(seen).__name__)
            return TrackingServerLost(uri, mlflow_outage_window(), first[:300])
        seen = seen.__cause__ or seen.__context__
    return None
