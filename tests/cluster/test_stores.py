"""Bad storage and tracking URLs: one `error:` line, nothing created, no secret printed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cem_ablate.config import ConfigError
from cem_ablate.tracking.store import check_tracking_server
from tests.cluster import rig
from tests.study.tiny_study import write_study

pytestmark = pytest.mark.cluster


def study_cli(tmp_path, storage: str, *extra: str, block_driver: bool = False) -> subprocess.CompletedProcess:
    file = write_study(tmp_path, name="stores")
    prelude = "import sys; sys.modules['psycopg'] = None\n" if block_driver else ""  # as if not installed
    code = prelude + (
        "from cem_ablate.cli.main import main\n"
        f"sys.exit(main({['study', str(file), '--storage', storage, *extra]!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", "import sys\n" + code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def assert_one_error_line(proc: subprocess.CompletedProcess, *expected: str, key: str = "--storage") -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}: "), proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]


def test_missing_driver_names_the_extra(tmp_path):
    proc = study_cli(tmp_path, "postgresql://cem:s3cret@127.0.0.1:5/optuna", block_driver=True)
    assert_one_error_line(proc, "pip install 'cem-ablate[postgres]'")
    assert not (tmp_path / "mlruns").exists()


def test_unreachable_server_is_one_line_without_the_password(tmp_path):
    port = rig.free_port()  # nothing listens there
    proc = study_cli(tmp_path, f"postgresql://cem:s3cret@127.0.0.1:{port}/optuna")
    assert_one_error_line(proc, f"127.0.0.1:{port}/optuna", "Connection refused")
    assert "s3cret" not in proc.stderr + proc.stdout
    assert not (tmp_path / "mlruns").exists()


def test_wrong_password_is_one_line(postgres, tmp_path):
    start = time.monotonic()
    proc = study_cli(tmp_path, postgres.url("optuna", password="wrong-password", host="127.0.0.1"))
    assert_one_error_line(proc, "password authentication failed")
    assert "wrong-password" not in proc.stderr
    assert time.monotonic() - start < 60  # refused logins are not retried


def test_unreachable_tracking_server_is_one_line_in_seconds(tmp_path):
    port = rig.free_port()
    start = time.monotonic()
    proc = study_cli(tmp_path, f"sqlite:///{tmp_path}/optuna.db", "--tracking-uri", f"http://127.0.0.1:{port}")
    assert_one_error_line(proc, f"cannot reach the MLflow server http://127.0.0.1:{port}", key="--tracking-uri")
    assert time.monotonic() - start < 60  # MLflow's own client retries for ~4 minutes
    assert not (tmp_path / "optuna.db").exists() and not (tmp_path / "mlruns").exists()


def test_a_server_that_is_not_mlflow_is_named():
    """A loopback HTTP server that answers 404 everywhere is not taken for MLflow."""
    import http.server
    import threading

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ConfigError, match="HTTP 501 on /health: not an MLflow server"):
            check_tracking_server(f"http://127.0.0.1:{server.server_port}", wait_s=0.1)
    finally:
        server.shutdown()


def _open(url: str) -> None:
    from cem_ablate.study.storage import StorageSettings, open_storage

    open_storage(StorageSettings(url)).engine.dispose()


def test_machines_opening_a_fresh_database_at_once(postgres):
    """Each opener creates Optuna's tables if missing: concurrent creators race
    (PostgreSQL: UniqueViolation), the losers must find the tables and go on."""
    import multiprocessing

    import psycopg

    admin = postgres.url("postgres", user="postgres", host="127.0.0.1")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE fresh OWNER {rig.PG_USER}")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_open, [postgres.url("fresh", host="127.0.0.1")] * 4)  # raises if any opener failed


@pytest.mark.soak
def test_a_storage_outage_mid_study_is_waited_out(postgres, mlflow_server, rig_corpus, tmp_path):
    """The Optuna database refuses connections for a while mid-trial (its server is
    up, so MLflow's database on it is not touched): the worker says so, waits, and the
    study ends as if nothing happened: every trial once, nothing failed."""
    import os
    import signal

    import psycopg

    from tests.cluster.studies import make_study, mlflow_runs, optuna_trials, study_command, tail, trained, wait_all

    admin = postgres.url("postgres", user="postgres", host="127.0.0.1")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE outage OWNER {rig.PG_USER}")
    name, grid = "rig-outage", (2.1e-3, 4.2e-3)
    file = make_study(
        tmp_path,
        name,
        rig_corpus,
        grid,
        max_steps=60,
        variants=1,
        ckpt_every_n_steps=10,
        val_every_n_steps=30,
        log_every_n_steps=1,
    )
    storage = postgres.url("outage", host="127.0.0.1")
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "CEM_ABLATE_CACHE": str(tmp_path / "cache"),
        "HF_DATASETS_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PYTHONUNBUFFERED": "1",
    }
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            study_command(file, storage, mlflow_server.url, tmp_path / "work"),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        rig.wait_until(lambda: next((tmp_path / "work").rglob("last.ckpt"), None), 240, "a checkpoint", interval=0.05)
        os.killpg(worker.pid, signal.SIGSTOP)  # the outage starts mid-trial, whatever the worker's speed
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("ALTER DATABASE outage ALLOW_CONNECTIONS false")
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'outage'")
            os.killpg(worker.pid, signal.SIGCONT)
            rig.wait_until(lambda: "unreachable" in log.read_text(errors="replace"), 60, "the outage message")
            time.sleep(3)
            conn.execute("ALTER DATABASE outage ALLOW_CONNECTIONS true")
        assert wait_all([worker], 300, [log]) == [0], tail(log)
    finally:
        rig.stop_group(worker)
    text = log.read_text(errors="replace")
    assert "retrying for up to" in text and "reachable again after" in text, tail(log)
    assert "cem-rig-secret" not in text

    trials = trained(optuna_trials(storage, name))
    assert sorted(t.state for t in trials) == ["COMPLETE"] * len(grid), trials  # nothing failed or retried
    client, runs = mlflow_runs(mlflow_server.url, name)
    assert len(runs.children) == len(grid)
    for child in runs.children:
        assert max(runs.child_steps(client, child).values()) == 1  # trained once


@pytest.fixture
def own_postgres():
    """A PostgreSQL server of this test alone (on 127.0.0.1): it is stopped and started again."""
    if rig.postgres_bin() is None:
        pytest.fail("PostgreSQL server binaries missing: apt-get install -y postgresql (.ci/run does)")
    server = rig.Postgres.start(listen=[], databases=("optuna",))
    yield server
    server.remove()


def _states_and_values(storage_url: str) -> list[tuple[str, float | None]]:
    import optuna

    storage = optuna.storages.RDBStorage(storage_url)
    try:
        return [(t.state.name, t.value) for s in storage.get_all_studies() for t in storage.get_all_trials(s._study_id)]
    finally:
        storage.engine.dispose()


def _restart_mid_trial(postgres_server, corpus, tmp_path, down_s: float) -> None:
    """`pg_ctl stop` mid-trial, `pg_ctl start` `down_s` later (same port, same data): the
    worker waits, and the study ends as if nothing happened: one trial, COMPLETE, with
    the uninterrupted run's objective."""
    from tests.study.test_preemption import _objectives, _run, _start, _study_file
    from tests.tracking.test_server_outage import _after_a_checkpoint

    path = _study_file(tmp_path, corpus, "pg-restart", [2e-3], steps=60)
    storage = postgres_server.url("optuna")
    tracking = f"sqlite:///{tmp_path / 'job' / 'mlflow.db'}"
    proc = _start(path, tmp_path / "job", 1, None, "--storage", storage, "--tracking-uri", tracking)
    try:
        _after_a_checkpoint(proc, tmp_path / "job")
        postgres_server.stop("fast")  # every connection dropped, nothing listens on the port
        time.sleep(down_s)
        postgres_server.start_server()
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert rig.PG_PASSWORD not in out
    if down_s >= 10:  # a heartbeat (every 10 s) met the server away: the wait is said, and its end
        assert "retrying for up to 120 s" in out and "reachable again after" in out, out[-3000:]
    _run(path, tmp_path / "straight")
    straight = list(_objectives(tmp_path / "straight").values())
    assert _states_and_values(storage) == [("COMPLETE", straight[0])]  # nothing failed or retried; bit for bit


@pytest.mark.slow
@pytest.mark.soak  # in CI every storage call Optuna makes goes through the outage retries: tests/study/test_optuna_storage.py
def test_a_postgresql_restart_mid_study_is_waited_out(own_postgres, rig_corpus, tmp_path):
    _restart_mid_trial(own_postgres, rig_corpus, tmp_path, down_s=2)


@pytest.mark.slow
@pytest.mark.soak
def test_a_20_s_postgresql_restart_mid_study_is_waited_out(own_postgres, rig_corpus, tmp_path):
    _restart_mid_trial(own_postgres, rig_corpus, tmp_path, down_s=20)
