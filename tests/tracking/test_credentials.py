"""Store URLs without their passwords, and MLflow's own credentials against a real
tracking server with authentication (`mlflow server --app-name basic-auth`, started
here on 127.0.0.1 with its own user database)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from cem_ablate.config import ConfigError
from cem_ablate.tracking.credentials import (
    MLFLOW_PASSWORD_ENV,
    MLFLOW_USERNAME_ENV,
    PASSWORD_ENV_PREFIX,
    with_password,
    without_password,
)
from cem_ablate.tracking.store import check_tracking_server
from tests.cluster import rig
from tests.cluster.studies import mlflow_runs
from tests.study.tiny_study import make_corpus, write_study


@pytest.fixture
def clean_env():
    """Whatever these tests put into the environment is gone after them."""
    before = dict(os.environ)
    yield
    for key in set(os.environ) - set(before):
        del os.environ[key]
    for key, value in before.items():
        os.environ[key] = value


def test_a_database_password_moves_to_the_environment_and_back(clean_env):
    url = "postgresql://cem:p%40ss:w%2Frd@db.example:5432/optuna"
    bare = without_password(url)
    assert bare == "postgresql://cem@db.example:5432/optuna"
    assert "p@ss" not in bare and "p%40ss" not in bare
    stored = [k for k in os.environ if k.startswith(PASSWORD_ENV_PREFIX)]
    assert len(stored) == 1 and os.environ[stored[0]] == "p@ss:w/rd"
    assert make_url(with_password(bare)) == make_url(url)  # the same URL to connect with
    assert make_url(with_password(bare)).password == "p@ss:w/rd"
    # Another database keeps its own password; a URL without one is left alone.
    other = without_password("mysql+pymysql://root:other@db.example/mlflow")
    assert with_password(other) == "mysql+pymysql://root:other@db.example/mlflow"
    assert make_url(with_password(bare)).password == "p@ss:w/rd"
    assert without_password("sqlite:////tmp/x/optuna.db") == "sqlite:////tmp/x/optuna.db"
    assert with_password("postgresql://nobody@elsewhere/db") == "postgresql://nobody@elsewhere/db"


def test_tracking_server_credentials_become_mlflows_own_variables(clean_env):
    bare = without_password("http://alice:s%3Acret@127.0.0.1:5000/prefix")
    assert bare == "http://127.0.0.1:5000/prefix"
    assert os.environ[MLFLOW_USERNAME_ENV] == "alice" and os.environ[MLFLOW_PASSWORD_ENV] == "s:cret"
    assert with_password(bare) == bare  # MLflow's client reads the variables itself
    assert without_password("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


# -- a real server with basic authentication ------------------------------------------------
ADMIN = "admin"


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    """`mlflow server --app-name basic-auth` on 127.0.0.1, its admin's password random."""
    pytest.importorskip("flask_wtf", reason="MLflow's basic-auth app needs Flask-WTF (pip install 'mlflow[auth]')")
    folder = tmp_path_factory.mktemp("auth-server")
    password = "pw-" + secrets.token_urlsafe(12)
    config = folder / "basic_auth.ini"
    config.write_text(
        "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
        f"database_uri = sqlite:///{folder / 'users.db'}\nadmin_username = {ADMIN}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    port = rig.free_port()
    env = {
        **os.environ,
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": password,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    log = folder / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--app-name",
                "basic-auth",
                "--backend-store-uri",
                f"sqlite:///{folder / 'mlflow.db'}",
                "--artifacts-destination",
                str(folder / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy():
        if proc.poll() is not None:
            raise RuntimeError(f"the MLflow server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        rig.wait_until(healthy, 240, f"the basic-auth MLflow server ({log})", interval=0.5)
        yield url, password, folder
    finally:
        rig.stop_group(proc)


def test_a_server_with_authentication_refuses_missing_or_wrong_credentials_in_one_line(auth_server, clean_env):
    url, password, _ = auth_server
    for key in (MLFLOW_USERNAME_ENV, MLFLOW_PASSWORD_ENV):
        os.environ.pop(key, None)
    with pytest.raises(
        ConfigError,
        match=r"refused a request without credentials \(HTTP 401\): set "
        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD",
    ):
        check_tracking_server(url)
    wrong = url.replace("http://", f"http://{ADMIN}:not-{password}@")
    with pytest.raises(ConfigError) as refused:
        check_tracking_server(wrong)
    assert "refused the credentials of MLFLOW_TRACKING_USERNAME (HTTP 401)" in str(refused.value)
    assert password not in str(refused.value)
    os.environ[MLFLOW_PASSWORD_ENV] = password  # the right ones, as MLflow's own variables
    check_tracking_server(url)


@pytest.mark.slow
@pytest.mark.soak
def test_a_study_logs_to_a_server_with_authentication_and_writes_no_password(auth_server, tmp_path):
    """user:password in --tracking-uri, two workers: the study runs, its runs are on the
    server, and the password is in no file under the study's folder (stores, run folders,
    logs, report); `cem-ablate report` reads it back with MLflow's variables instead."""
    url, password, server_folder = auth_server
    corpus = make_corpus(tmp_path / "corpus")
    work = tmp_path / "work"
    work.mkdir()
    write_study(work, name="authed", grid=(1.3e-3, 3.9e-3), corpus=corpus)
    env = {k: v for k, v in os.environ.items() if k not in (MLFLOW_USERNAME_ENV, MLFLOW_PASSWORD_ENV)}
    env |= {"CEM_ABLATE_CACHE": str(tmp_path / "cache"), "HF_DATASETS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
    tracking = url.replace("http://", f"http://{ADMIN}:{password}@")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cem_ablate.cli.main",
            "study",
            "authed.yaml",
            "--workers",
            "2",
            "--tracking-uri",
            tracking,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert password not in proc.stdout + proc.stderr
    leaks = [p for p in work.rglob("*") if p.is_file() and password.encode() in p.read_bytes()]
    assert leaks == [] and list(work.rglob("worker-payload-*.pkl")) == []
    assert (work / "reports" / "authed" / "report.md").exists()

    os.environ[MLFLOW_USERNAME_ENV], os.environ[MLFLOW_PASSWORD_ENV] = ADMIN, password
    try:
        client, runs = mlflow_runs(url, "authed")
        assert len(runs.parents) == 2 and len(runs.children) == 4
        assert all(c.info.status == "FINISHED" for c in runs.children)
        report = subprocess.run(
            [sys.executable, "-m", "cem_ablate.cli.main", "report", "authed.yaml", "--tracking-uri", url],
            cwd=work,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert report.returncode == 0, report.stderr[-3000:]
    finally:
        del os.environ[MLFLOW_USERNAME_ENV], os.environ[MLFLOW_PASSWORD_ENV]
    # The server itself never stored the password in clear either (its users DB holds a hash).
    assert not [p for p in Path(server_folder).rglob("*") if p.is_file() and password.encode() in p.read_bytes()]
