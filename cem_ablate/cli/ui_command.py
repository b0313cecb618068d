"""`cem-ablate ui`: serve the MLflow UI over the study store, on 127.0.0.1.

Runs `mlflow server --app-name cem-ablate` (tracking.server: one worker, job execution
off, its own process group; tracking.ui_app: a study's plain experiment URL opens on
the runs table with the parent runs' display columns, tracking.comparison_columns:
per baseline Δ, its interval, Holm p and verdict, then objective* and lr*, sized to
fit 1600 px; also stored as each study's shared view, tracking.runs_table_view) and
prints the URL, then one line per study in the store, then how to
compare a variant's trials:

    quickstart: http://127.0.0.1:5000/#/experiments/1
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

COMPARE_HINT = (
    "A variant's trials side by side: expand its run (+), tick its trials, Compare; "
    "then pick `objective` under Metrics (params train.lr, train.seed)."
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", help="store to serve (default sqlite:///<cwd>/mlruns/mlflow.db)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    parser.add_argument("--artifacts", help="default artifact root for new experiments (default: next to the store)")
    parser.add_argument("--study", help="print the URL of this study's experiment")


def run(args: argparse.Namespace) -> int:
    from cem_ablate.config import ConfigError
    from cem_ablate.tracking.credentials import without_password
    from cem_ablate.tracking.readback import study_experiments
    from cem_ablate.tracking.runs_table_view import share_views
    from cem_ablate.tracking.server import UI_APP, TrackingServer, experiment_id
    from cem_ablate.tracking.store import default_artifact_root, default_tracking_uri, sqlite_store_path

    uri = without_password(args.tracking_uri) or default_tracking_uri()  # password: environment only
    db = sqlite_store_path(uri)
    if db is not None and not db.exists():
        raise ConfigError("--tracking-uri", f"no MLflow store at {db}; run a study first.")
    if not 0 < args.port < 65536:
        raise ConfigError("--port", f"must be a TCP port, got {args.port}.")
    artifacts = args.artifacts or str(default_artifact_root(uri) or Path("mlruns").resolve())
    url = f"http://{args.host}:{args.port}"
    page = "#/experiments"
    if args.study:
        experiment = experiment_id(uri, args.study)
        if experiment is None:
            raise ConfigError("--study", f"no study {args.study!r} in {uri}.")
        page = f"#/experiments/{experiment}/runs"

    share_views(uri)  # each study's answer columns as its shared view (tracking.runs_table_view)
    # The server's own log goes to stderr: stdout carries only the URL line.
    server = TrackingServer(uri, args.host, args.port, artifacts, stdout=sys.stderr, app_name=UI_APP)
    server.start()

    def stop_and_exit(*_: object) -> None:
        server.stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop_and_exit)
    try:
        if not server.wait_ready():
            server.stop()
            print(f"error: the MLflow server did not start on {url} (is the port free?)", file=sys.stderr)
            return 1
        print(f"MLflow UI: {url}/{page}?workflowType=machine_learning   (Ctrl-C stops it)", flush=True)
        for name, experiment in study_experiments(uri):  # tracking.readback
            print(f"{name}: {url}/#/experiments/{experiment}", flush=True)
        print(COMPARE_HINT, flush=True)
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
