"""Local SQLite stores: private files, one creator at a time, damaged files refused untouched."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import subprocess
import sys
import time

import pytest

from cem_ablate.config import ConfigError
from cem_ablate.tracking.local_store import check_readable, creation_lock, make_private, private_files


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_files_are_the_users_only_and_the_umask_comes_back(tmp_path):
    before = os.umask(0o022)
    try:
        with private_files():
            (tmp_path / "folder").mkdir()
            (tmp_path / "folder" / "file").write_text("x")
            subprocess.run(["sh", "-c", f"echo y > {tmp_path / 'child'}"], check=True)  # children inherit it
        (tmp_path / "after").write_text("z")
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(before)
    assert mode(tmp_path / "folder") == 0o700 and mode(tmp_path / "folder" / "file") == 0o600
    assert mode(tmp_path / "child") == 0o600
    assert mode(tmp_path / "after") == 0o644


def test_an_older_store_file_is_narrowed(tmp_path):
    db = tmp_path / "mlflow.db"
    sqlite3.connect(db).close()
    db.chmod(0o644)
    make_private(db)
    assert mode(db) == 0o600


def test_the_creation_lock_admits_one_process_at_a_time(tmp_path):
    db, log = tmp_path / "store.db", tmp_path / "log"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\nfrom pathlib import Path\nfrom cem_ablate.tracking.local_store import creation_lock\n"
                f"log = Path({str(log)!r})\n"
                f"with creation_lock(Path({str(db)!r})):\n"
                "    log.write_text('held\\n'); time.sleep(1.5); log.write_text('held\\nreleased\\n')\n"
            ),
        ]
    )
    deadline = time.monotonic() + 600  # a hang guard: the holder imports the package first
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.exists(), "the holder never took the lock"
    with creation_lock(db):
        assert log.read_text() == "held\nreleased\n"  # we got in only after it left
    assert holder.wait(60) == 0


def test_two_processes_creating_one_mlflow_store_at_once_both_succeed(tmp_path):
    """MLflow creates its schema check-then-create: without the creation lock the second of
    two first launches died in the migration (`table webhooks already exists`, 4 times in 4;
    the whole-study version of this is the soak test in tests/cli/test_store_errors.py)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom mlflow import MlflowClient\n"
        "from cem_ablate.tracking.store import make_client\n"
        # imported: wait for the other process, so that both open the new store together
        f"folder = Path({str(tmp_path)!r})\n(folder / ('ready-' + sys.argv[1])).touch()\n"
        "while len(list(folder.glob('ready-*'))) < 2:\n    time.sleep(0.005)\n"
        f"client = make_client({uri!r})\n"
        "client.create_experiment(sys.argv[1])\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for name in ("a", "b")
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]  # a hang guard
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs)
    from cem_ablate.tracking.store import make_client

    assert sorted(e.name for e in make_client(uri).search_experiments()) == ["Default", "a", "b"]
    assert mode(tmp_path / "mlflow.db") == 0o600


def _store(tmp_path):
    db = tmp_path / "optuna.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE trials (id INTEGER PRIMARY KEY, value TEXT)")
        conn.executemany("INSERT INTO trials (value) VALUES (?)", [("x" * 500,)] * 2000)
    return db


def test_a_readable_or_empty_store_passes(tmp_path):
    check_readable(_store(tmp_path), "--storage", "Optuna")
    (tmp_path / "new.db").write_bytes(b"")
    check_readable(tmp_path / "new.db", "--storage", "Optuna")
    check_readable(tmp_path / "absent.db", "--storage", "Optuna")


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
def test_a_damaged_store_is_refused_untouched(tmp_path, damage):
    db = _store(tmp_path)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3] if damage == "truncate" else os.urandom(200) + data[200:])
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with pytest.raises(ConfigError) as refused:
        check_readable(db, "--storage", "Optuna")
    text = str(refused.value)
    assert text.startswith(f"--storage: {db} is not a readable Optuna database (")
    assert f"mv {db} {db}.damaged" in text
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["optuna.db"]  # no journal or WAL left behind


def test_make_client_refuses_a_damaged_mlflow_store_untouched(tmp_path):
    """What `cem-ablate study --tracking-uri` does with it (the whole-study version, with the
    rerun after the file is restored, is tests/cli/test_store_errors.py; its MLflow cases soak)."""
    from cem_ablate.tracking.store import make_client

    db = tmp_path / "mlruns" / "mlflow.db"
    make_client(f"sqlite:///{db}").create_experiment("kept")
    good = db.read_bytes()
    db.write_bytes(os.urandom(4096) + good[4096:])
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with pytest.raises(ConfigError) as refused:
        make_client(f"sqlite:///{db}")
    text = str(refused.value)
    assert text.startswith(f"--tracking-uri: {db} is not a readable MLflow database ("), text
    assert f"mv {db} {db}.damaged" in text
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    db.write_bytes(good)  # restored: everything is there
    assert [e.name for e in make_client(f"sqlite:///{db}").search_experiments() if e.name == "kept"] == ["kept"]
