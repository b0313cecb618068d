"""`cem-ablate ui`: serve the MLflow UI over the study store, on 127.0.0.1.

Runs `mlflow server` with one worker and job execution off (ready in ~12 s instead
of ~50 s, NOTES), in its own process group so that stopping this command stops every
helper process the server started. Prints the URL in the classic ML view
(`?workflowType=machine_learning`; MLflow 3 opens in its GenAI view otherwise).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

READY_TIMEOUT_S = 120


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tracking-uri", help="store to serve (default sqlite:///<cwd>/mlruns/mlflow.db)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    parser.add_argument("--artifacts", help="default artifact root for new experiments (default: next to the store)")
    parser.add_argument("--study", help="print the URL of this study's experiment")


def _wait_ready(url: str, proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def _experiment_id(uri: str, study: str) -> str | None:
    from cem_ablate.tracking.store import make_client

    experiment = make_client(uri).get_experiment_by_name(study)
    return experiment.experiment_id if experiment is not None else None


def run(args: argparse.Namespace) -> int:
    from cem_ablate.config import ConfigError
    from cem_ablate.tracking.store import default_artifact_root, default_tracking_uri, sqlite_store_path

    uri = args.tracking_uri or default_tracking_uri()
    db = sqlite_store_path(uri)
    if db is not None and not db.exists():
        raise ConfigError("--tracking-uri", f"no MLflow store at {db}; run a study first.")
    if not 0 < args.port < 65536:
        raise ConfigError("--port", f"must be a TCP port, got {args.port}.")
    artifacts = args.artifacts or str(default_artifact_root(uri) or Path("mlruns").resolve())
    url = f"http://{args.host}:{args.port}"
    page = "#/experiments"
    if args.study:
        experiment = _experiment_id(uri, args.study)
        if experiment is None:
            raise ConfigError("--study", f"no study {args.study!r} in {uri}.")
        page = f"#/experiments/{experiment}/runs"

    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true")
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
               "--default-artifact-root", artifacts, "--host", args.host, "--port", str(args.port),
               "--workers", "1"]
    # The server's own log goes to stderr: stdout carries only the URL line.
    proc = subprocess.Popen(command, env=env, start_new_session=True, stdout=sys.stderr)

    def stop(*_):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, lambda *_: (stop(), sys.exit(0)))
    try:
        if not _wait_ready(url, proc):
            stop()
            print(f"error: the MLflow server did not start on {url} (is the port free?)", file=sys.stderr)
            return 1
        print(f"MLflow UI: {url}/{page}?workflowType=machine_learning   (Ctrl-C stops it)", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop()
