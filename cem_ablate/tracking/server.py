"""An `mlflow server` process on a store: the UI of `cem-ablate ui` (and a tracking
server for tests and clusters).

One worker and job execution off: ready several times sooner (measured: see
docs/lab-notes/from-code-comments.md). The server
runs in its own process group, so stopping it stops every helper process it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

READY_TIMEOUT_S = 120
UI_APP = "cem-ablate"  # the mlflow.app entry point of tracking.ui_app: the UI opens on the training view


class TrackingServer:
    def __init__(
        self, backend_uri: str, host: str, port: int, artifacts: str, stdout=None, app_name: str | None = None
    ):
        """`app_name`: an `mlflow.app` entry point, e.g. UI_APP (tracking.ui_app)."""
        self.backend_uri, self.host, self.port, self.artifacts = backend_uri, host, port, artifacts
        self.stdout, self.app_name = stdout, app_name
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true")
        from cem_ablate.tracking.credentials import with_password

        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            with_password(self.backend_uri),
            "--default-artifact-root",
            self.artifacts,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--workers",
            "1",
        ] + (["--app-name", self.app_name] if self.app_name else [])
        self.proc = subprocess.Popen(command, env=env, start_new_session=True, stdout=self.stdout)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """True once `/health` answers; False if the server exited or the time ran out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.5)
        return False

    def wait(self) -> int:
        return self.proc.wait() if self.proc is not None else 0

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> TrackingServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def experiment_id(uri: str, name: str) -> str | None:
    from cem_ablate.tracking.store import make_client

    experiment = make_client(uri).get_experiment_by_name(name)
    return experiment.experiment_id if experiment is not None else None
