"""A password given in `--storage` reaches no file the platform writes.

Real PostgreSQL (the cluster rig's server, on 127.0.0.1 only), two worker processes (so
the coordinator writes its worker payload for them): the payload holds no password and is 0600 while
the workers run and gone after; nothing under the study's folder (stores, run folders,
logs, report) and nothing in the Optuna database (pg_dump) holds it; everything under
`mlruns/` is the user's only (files 0600, folders 0700).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from tests.cluster import rig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def postgres():
    if os.geteuid() != 0:
        pytest.skip("the rig starts PostgreSQL as the `postgres` user: needs root")
    if rig.postgres_bin() is None:
        pytest.fail("PostgreSQL server binaries missing: apt-get install -y postgresql (.ci/run does)")
    server = rig.Postgres.start(listen=[])
    yield server
    server.remove()


def pg_dump(server, database: str) -> str:
    proc = subprocess.run(
        [
            "su",
            "postgres",
            "-s",
            "/bin/sh",
            "-c",
            f"PGPASSWORD='{rig.PG_PASSWORD}' {server.bin}/pg_dump -h 127.0.0.1 -p {server.port} -U postgres {database}",
        ],
        capture_output=True,
        text=True,
        cwd="/",
        check=True,
    )
    return proc.stdout


class PayloadWatcher(threading.Thread):
    """Reads every worker payload file while it exists (the coordinator removes it at the end)."""

    def __init__(self, folder):
        super().__init__(daemon=True)
        self.folder, self.seen, self.stop = folder, {}, threading.Event()

    def run(self):
        while not self.stop.is_set():
            for payload in self.folder.rglob("worker-payload-*.pkl"):
                try:
                    self.seen[payload] = (payload.read_bytes(), stat.S_IMODE(payload.stat().st_mode))
                except OSError:
                    pass  # removed between listing and reading
            time.sleep(0.05)


def test_the_database_password_reaches_no_file(postgres, corpus, tmp_path):
    from tests.study.tiny_study import own_cache, write_study

    secret = rig.PG_PASSWORD.encode()
    storage = postgres.url("optuna", host="127.0.0.1")
    assert rig.PG_PASSWORD in storage
    write_study(tmp_path, name="secret", grid=(1.7e-3, 5.1e-3), corpus=corpus)
    env = {
        **os.environ,
        "CEM_ABLATE_CACHE": own_cache(tmp_path),
        "HF_DATASETS_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    watcher = PayloadWatcher(tmp_path)
    watcher.start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "cem_ablate.cli.main",
                "study",
                "secret.yaml",
                "--workers",
                "2",
                "--storage",
                storage,
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        watcher.stop.set()
        watcher.join()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert rig.PG_PASSWORD not in proc.stdout + proc.stderr
    assert "storage postgresql://cem@127.0.0.1" in proc.stdout  # what the study says it uses

    # The payload: seen while the workers ran, without the password, 0600; removed after.
    assert watcher.seen, "no worker payload file was seen while the workers ran"
    for payload, (content, mode) in watcher.seen.items():
        assert secret not in content and mode == 0o600, (payload, oct(mode))
    assert list(tmp_path.rglob("worker-payload-*.pkl")) == []

    written = [p for p in tmp_path.rglob("*") if p.is_file() and "corpus" not in p.parts]
    assert any(p.name == "result.json" for p in written) and any(p.suffix == ".log" for p in written)
    assert [p for p in written if secret in p.read_bytes()] == []
    assert secret.decode() not in pg_dump(postgres, "optuna")

    # Everything under mlruns/ is the user's only.
    loose = [
        (str(p), oct(stat.S_IMODE(p.stat().st_mode)))
        for p in [tmp_path / "mlruns", *(tmp_path / "mlruns").rglob("*")]
        if stat.S_IMODE(p.stat().st_mode) & 0o077
    ]
    assert loose == []
