"""A stopped worker in a real two-worker study: real processes, real signals.

SIGSTOP one worker mid-trial: past the grace period the coordinator says so in one
line, the other worker retrains the slot (resuming its checkpoint), and the study
ends with every trial finished once, within grace + 60 s. SIGCONT the stopped worker
as soon as its claim was failed: it must write nothing for that trial (its run
folder, its MLflow curve and its Optuna record stay as they were) and the study
still ends normally. Ctrl-C on a study with a stopped worker ends it at once.
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import psutil
import pytest
import yaml
from optuna.trial import TrialState

from cem_ablate.study.optuna_storage import trial_id_of
from cem_ablate.tracking.store import make_client
from tests.study.test_coordinator import optuna_trials
from tests.study.tiny_study import write_study

GRACE = 8
STEPS = 40  # per trial: long enough to be stopped after a checkpoint and before the end


def _study(tmp_path, corpus, name, grid):
    path = write_study(tmp_path, name=name, grid=grid, max_steps=STEPS, corpus=corpus)
    mapping = yaml.safe_load(path.read_text())
    mapping["base"]["train"].update(ckpt_every_n_steps=5, val_every_n_steps=20)
    path.write_text(yaml.safe_dump(mapping))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "cem_ablate.cli.main",
        "study",
        str(path),
        "--no-report",
        "--workers",
        "2",
        "--heartbeat",
        "1",
        "--grace",
        str(GRACE),
    ]
    return subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def _trials(root):
    try:
        return [t for ts in optuna_trials(root).values() for t in ts]
    except Exception:  # noqa: BLE001 - the schema is being created
        return []


def _stop_a_worker_mid_trial(root, proc, timeout=300):
    """SIGSTOP the worker of a running trial that has written a checkpoint; (pid, trial)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if not any(root.rglob("checkpoints/digests.json")):  # cheap: opening Optuna's store is not
            time.sleep(0.1)
            continue
        workers = {p.pid for p in psutil.Process(proc.pid).children()}
        for t in _trials(root):
            run_dir = t.user_attrs.get("run_dir")
            pid = t.user_attrs.get("worker", {}).get("pid")
            if (
                t.state == TrialState.RUNNING
                and pid in workers
                and run_dir
                and os.path.exists(os.path.join(run_dir, "checkpoints", "digests.json"))
            ):
                os.kill(pid, signal.SIGSTOP)
                return pid, t
        time.sleep(0.1)
    raise AssertionError("no running trial with a checkpoint")


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _record(root, trial):
    t = next(x for x in _trials(root) if trial_id_of(x) == trial_id_of(trial))
    return t.state, t.value, dict(t.user_attrs), dict(t.intermediate_values)


def _finished_once(root, grid):
    every = _trials(root)
    done = Counter((t.user_attrs["run_dir"], t.user_attrs["slot"]) for t in every if t.state == TrialState.COMPLETE)
    assert len(done) == 2 * len(grid) and set(done.values()) == {1}, done  # every trial finished once
    return every


def _logs(root, name):
    return "\n".join(p.read_text() for p in sorted((root / "mlruns" / "studies" / name / "logs").glob("*.log")))


@pytest.mark.slow
@pytest.mark.soak  # in CI the fence itself: tests/study/test_trial_run.py (a fenced attempt writes nothing)
def test_a_stopped_worker_that_wakes_up_writes_nothing_for_its_lost_trial(tmp_path, corpus):
    grid = [1e-3, 2e-3, 4e-3]
    proc = _study(tmp_path, corpus, "woken", grid)
    try:
        pid, stopped = _stop_a_worker_mid_trial(tmp_path, proc)
        _wait(lambda: _record(tmp_path, stopped)[0] == TrialState.FAIL, GRACE + 60, "the claim to be failed as stale")
        failed = _record(tmp_path, stopped)
        os.kill(pid, signal.SIGCONT)  # wakes up mid-step with its claim gone
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    every = _finished_once(tmp_path, grid)
    # Optuna: the lost claim's record is exactly as it was when it was failed (FAIL, no outcome)
    assert _record(tmp_path, stopped) == failed and "status" not in failed[2] and failed[1] is None
    fenced = [line for line in _logs(tmp_path, "woken").splitlines() if "wrote nothing more" in line]
    killed = [line for line in out.splitlines() if "while holding the lock of" in line]
    if killed:  # stopped inside a store write: killed at once (study.store_locks), so it never woke up
        assert len(killed) == 1 and f"pid {pid}" in killed[0] and not fenced, (killed, fenced)
    else:
        assert len(fenced) == 1 and f"trial {stopped.number}: " in fenced[0], fenced  # it woke up and was fenced
    # its slot: one result (the retry's, as recorded) and one point per step in the MLflow curve
    retry = next(
        t for t in every if t.state == TrialState.COMPLETE and t.user_attrs["run_dir"] == stopped.user_attrs["run_dir"]
    )
    result = json.loads(open(os.path.join(retry.user_attrs["run_dir"], "result.json")).read())
    assert result["status"] == "finished" and result["test_ppl"] == retry.value
    curve = make_client(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}").get_metric_history(
        stopped.user_attrs["mlflow_run_id"], "train_loss"
    )
    steps = sorted(m.step for m in curve)
    assert steps == list(range(1, STEPS, 2)), steps  # logged every 2 steps: each point once


@pytest.mark.slow
@pytest.mark.soak  # in CI the fence itself: tests/study/test_trial_run.py (a fenced attempt writes nothing)
def test_the_study_ends_without_the_worker_that_stays_stopped(tmp_path, corpus):
    grid = [1e-3, 2e-3]
    proc = _study(tmp_path, corpus, "stalled", grid)
    try:
        pid, stopped = _stop_a_worker_mid_trial(tmp_path, proc)
        stopped_at = time.monotonic()
        out, _ = proc.communicate(timeout=GRACE + 60 + 240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    ended_in = time.monotonic() - stopped_at
    ended_at = datetime.datetime.now()
    assert proc.returncode == 0, out
    every = _finished_once(tmp_path, grid)
    # it did not wait on the stopped worker: it ended soon after the last trial (a few polls,
    # then the final publication: fits and plots, slow on a loaded machine)
    last_done = max(t.datetime_complete for t in every if t.state == TrialState.COMPLETE)
    assert (ended_at - last_done).total_seconds() < 60, (ended_at, last_done)
    lines = [line for line in out.splitlines() if "stopped making progress" in line]
    assert len(lines) == 1 and f"pid {pid}" in lines[0], out
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    print(
        f"stopped worker: study ended {ended_in:.0f} s after SIGSTOP (grace {GRACE} s), "
        f"{(ended_at - last_done).total_seconds():.1f} s after its last trial finished"
    )
    assert ended_in < GRACE + 60 + 120, ended_in  # the rest of the trials ran meanwhile, on a shared machine


@pytest.mark.slow
@pytest.mark.soak
def test_ctrl_c_ends_a_study_with_a_stopped_worker_at_once(tmp_path, corpus):
    proc = _study(tmp_path, corpus, "interrupted", [1e-3, 2e-3])
    try:
        pid, _ = _stop_a_worker_mid_trial(tmp_path, proc)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
        sent = time.monotonic()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - sent < 30
    assert proc.returncode == 130, out
    assert "interrupted:" in out and "rerun the same command to resume them" in out
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _stop_a_worker_inside_a_store_write(root, proc, timeout=300):
    """SIGSTOP workers at random moments until one is stopped holding a store's lock
    (SIGCONT it otherwise); its pid."""
    from cem_ablate.study.store_locks import STOPPED, stopped_lock_holders

    stores = [root / "mlruns" / "optuna.db", root / "mlruns" / "mlflow.db"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        for child in psutil.Process(proc.pid).children():
            if not _trials(root):
                continue
            try:
                os.kill(child.pid, signal.SIGSTOP)
                until = time.monotonic() + 2
                while child.status() not in STOPPED | {psutil.STATUS_ZOMBIE} and time.monotonic() < until:
                    time.sleep(0.005)
                if child.status() == psutil.STATUS_ZOMBIE or stopped_lock_holders(stores, {child.pid}):
                    return child.pid  # (a zombie: the coordinator already killed it for its lock)
                os.kill(child.pid, signal.SIGCONT)
            except (ProcessLookupError, psutil.NoSuchProcess):
                continue
            time.sleep(0.05)
    raise AssertionError("no worker caught inside a store write")


@pytest.mark.slow
@pytest.mark.soak
def test_a_worker_stopped_inside_a_store_write_is_killed_and_the_study_ends(tmp_path, corpus):
    """Stopped holding SQLite's lock, a worker would block every other process (CI saw the
    replacements fail one after another with "database is locked"): it is killed at once."""
    grid = [1e-3, 2e-3]
    proc = _study(tmp_path, corpus, "locked", grid)
    try:
        pid = _stop_a_worker_inside_a_store_write(tmp_path, proc)
        out, _ = proc.communicate(timeout=GRACE + 60 + 240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    _finished_once(tmp_path, grid)
    killed = [line for line in out.splitlines() if "while holding the lock of" in line]
    assert len(killed) == 1 and f"pid {pid}" in killed[0], out
    assert "database is locked" not in out and "failed (" not in out, out
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
