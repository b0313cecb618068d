"""Where runs are stored: the default local store, environment, clients.

Default store: `sqlite:///<cwd>/mlruns/mlflow.db`, artifacts under `mlruns/`
(MLflow 3 refuses the plain `./mlruns` file store). Any tracking URI works,
e.g. `http://host:5000` for a tracking server. Every caller passes a URI explicitly:
Lightning's MLFlowLogger would otherwise fall back to `file:./mlruns`.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

from cem_ablate.config import ConfigError

SERVER_TIMEOUT_S = 5  # per attempt
SERVER_ATTEMPTS = 3  # a server still starting gets ~10 s


def default_tracking_uri(root: Path | None = None) -> str:
    root = Path.cwd() if root is None else Path(root)
    return f"sqlite:///{(root / 'mlruns' / 'mlflow.db').resolve()}"


def sqlite_store_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):])
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


def make_client(uri: str):
    """An MlflowClient on `uri`; creates the local store's folder (call after validation)."""
    quiet_mlflow()
    db = sqlite_store_path(uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    import logging

    from mlflow import MlflowClient  # configures mlflow's loggers on first import: quiet them after

    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    return MlflowClient(tracking_uri=uri)


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

    if not uri.startswith(("http://", "https://")):
        return
    shown = shown_url(uri)
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=SERVER_TIMEOUT_S) as response:
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
