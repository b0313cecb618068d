"""Stores that say what is wrong: two first launches at once, a damaged SQLite store, a
full disk, an unreachable server in the dry run. Each ends in one `error:` line naming
the file or URL and what to do, with no traceback, and nothing is lost: after the fix the
same command finishes every trial once.

Real processes (`python -m cem_ablate.cli.main study ...`), real SQLite stores; the full
disk is a small tmpfs this test mounts (root) and removes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster import rig
from tests.cluster.studies import mlflow_runs, optuna_trials, trained
from tests.study.tiny_study import make_corpus, own_cache, write_study

GRID = (1.1e-3, 3.3e-3)  # no other test trains these points
N_TRIALS = 2 * len(GRID)  # llama and cem_attention, one seed


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpus"))


def cli(folder: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or study_env(folder),
    )


def study_env(folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CEM_ABLATE_CACHE": own_cache(folder),
        "HF_DATASETS_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PYTHONUNBUFFERED": "1",
    }


def assert_one_error_line(proc: subprocess.CompletedProcess, *expected: str) -> str:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-4000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-4000:]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def assert_every_trial_once(folder: Path, name: str) -> None:
    """Optuna: one finished trial per grid point and variant; MLflow: one child each,
    trained once (each train_loss step logged once)."""
    storage = f"sqlite:///{folder / 'mlruns' / 'optuna.db'}"
    trials = trained(optuna_trials(storage, name))
    complete = Counter(t.key for t in trials if t.state == "COMPLETE")
    assert len(complete) == N_TRIALS and set(complete.values()) == {1}, trials
    client, runs = mlflow_runs(f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}", name)
    assert len(runs.parents) == 2, [r.info.run_name for r in runs.parents]
    finished = [c for c in runs.children if c.info.status == "FINISHED"]
    assert (
        len(finished) == N_TRIALS
        and len({c.data.tags["cem_ablate.slot"] + c.data.tags["mlflow.parentRunId"] for c in finished}) == N_TRIALS
    )
    for child in finished:
        assert max(runs.child_steps(client, child).values()) == 1


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.soak  # in CI the lock itself: tests/tracking/test_local_store.py (one process at a time)
def test_two_studies_started_together_on_an_empty_folder(tmp_path, corpus):
    """Both first launches create the stores; before the creation lock the second died
    in MLflow's schema migration (`table webhooks already exists`) 4 times in 4."""
    write_study(tmp_path, name="together", grid=GRID, corpus=corpus)
    command = [sys.executable, "-m", "cem_ablate.cli.main", "study", "together.yaml", "--no-report"]
    first = subprocess.Popen(
        command, cwd=tmp_path, env=study_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    time.sleep(0.3)
    second = subprocess.Popen(
        command, cwd=tmp_path, env=study_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    outputs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    assert not any("Traceback" in o for o in outputs)
    assert_every_trial_once(tmp_path, "together")


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory, corpus):
    """A finished tiny study and a copy of its stores as they were."""
    folder = tmp_path_factory.mktemp("damaged")
    write_study(folder, name="damaged", grid=GRID, corpus=corpus)
    proc = cli(folder, "study", "damaged.yaml", "--no-report")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


@pytest.mark.slow
@pytest.mark.parametrize(
    "store, option, kind, damage",
    [
        # in CI each store refusing a damaged file: tests/tracking/test_local_store.py
        pytest.param("optuna.db", "--storage", "Optuna", "truncate", marks=pytest.mark.soak),
        pytest.param("mlflow.db", "--tracking-uri", "MLflow", "truncate", marks=pytest.mark.soak),
        # in CI: make_client refusing a damaged MLflow store (tests/tracking/test_local_store.py)
        pytest.param("mlflow.db", "--tracking-uri", "MLflow", "overwrite", marks=pytest.mark.soak),
    ],
)
def test_a_damaged_store_is_one_line_and_left_as_it_is(finished_study, store, option, kind, damage):
    folder = finished_study
    db = folder / "mlruns" / store
    good = db.read_bytes()
    if damage == "truncate":
        db.write_bytes(good[: len(good) // 2])
    else:
        db.write_bytes(os.urandom(4096) + good[4096:])
    damaged = digest(db)
    try:
        line = assert_one_error_line(
            cli(folder, "study", "damaged.yaml", "--no-report"),
            f"error: {option}: {db} is not a readable {kind} database",
            f"mv {db} {db}.damaged",
        )
        assert digest(db) == damaged  # nothing written to it
        if store == "optuna.db":  # the dry run reads it too
            assert assert_one_error_line(cli(folder, "study", "damaged.yaml", "--dry-run")) == line
    finally:
        db.write_bytes(good)
    # Nothing lost: with the file restored, the same command finds every trial done.
    proc = cli(folder, "study", "damaged.yaml", "--no-report")
    assert proc.returncode == 0 and "every trial is already done" in proc.stdout, proc.stderr[-3000:]
    assert_every_trial_once(folder, "damaged")


def test_dry_run_against_an_unreachable_server_is_one_line_in_about_a_dry_runs_time(tmp_path):
    """The refusal is one line, and it comes at once, not after a client's retries: it takes no
    longer than twice the same dry run against a local store, plus 15 s. A ratio to a run on the
    same machine at the same moment, so a loaded runner slows both (a fixed bound failed there)."""
    local = tmp_path / "local"
    local.mkdir()
    write_study(local, name="nowhere", grid=GRID)
    start = time.monotonic()
    planned = cli(local, "study", "nowhere.yaml", "--dry-run", timeout=600)
    dry_run_s = time.monotonic() - start
    assert planned.returncode == 0, planned.stderr[-3000:]
    write_study(tmp_path, name="nowhere", grid=GRID)
    port = rig.free_port()  # nothing listens there
    start = time.monotonic()
    proc = cli(
        tmp_path,
        "study",
        "nowhere.yaml",
        "--dry-run",
        "--storage",
        f"postgresql://cem:s3cret-dry@127.0.0.1:{port}/optuna",
        timeout=120,
    )
    assert_one_error_line(
        proc,
        f"error: --storage: cannot connect to postgresql://cem@127.0.0.1:{port}/optuna",
        "Connection refused",
        "start the database server",
    )
    assert "s3cret-dry" not in proc.stdout + proc.stderr
    refused_s = time.monotonic() - start
    assert refused_s < 2 * dry_run_s + 15, (refused_s, dry_run_s)
    assert not (tmp_path / "mlruns").exists()


# -- a full disk --------------------------------------------------------------------------
@contextlib.contextmanager
def small_disk(folder: Path, size_mb: int):
    """A tmpfs of `size_mb` MiB mounted on `folder` (root only), unmounted after."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a size-limited filesystem needs root (mount -t tmpfs)")
    folder.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path, leave_kib: int) -> Path:
    """One file taking all but `leave_kib` KiB of the disk."""
    filler = folder / "filler"
    free = shutil.disk_usage(folder).free
    with open(filler, "wb") as out:
        out.truncate(0)
        chunk = b"\0" * (1 << 20)
        left = free - leave_kib * 1024
        while left > 0:
            left -= out.write(chunk[: min(len(chunk), left)])
    return filler


@pytest.mark.slow
@pytest.mark.parametrize(
    "leave_kib, workers",
    [
        pytest.param(
            200, 1, marks=pytest.mark.soak
        ),  # full while the stores are created (SQLite: "database or disk is full")
        (2600, 1),  # full mid-study: a checkpoint (OSError ENOSPC) or an MLflow write
        pytest.param(
            2600, 2, marks=pytest.mark.soak
        ),  # the same in worker processes: the coordinator says their error once
    ],
)
def test_a_full_disk_is_one_line_and_the_rerun_finishes(tmp_path, corpus, leave_kib, workers):
    with small_disk(tmp_path / "disk", 24) as disk:
        write_study(disk, name="full", grid=GRID, corpus=corpus)
        env = study_env(tmp_path)  # the caches off the small disk
        filler = fill(disk, leave_kib)
        line = assert_one_error_line(
            cli(disk, "study", "full.yaml", "--no-report", "--workers", str(workers), env=env),
            f"error: disk full writing {disk}/",
            " free on its disk)",
            "free space there and rerun the same command",
        )
        filler.unlink()
        proc = cli(disk, "study", "full.yaml", "--no-report", env=env)
        assert proc.returncode == 0, line + "\n" + proc.stdout[-2000:] + proc.stderr[-3000:]
        assert_every_trial_once(disk, "full")
