"""Two workers on one machine share a PostgreSQL study; one is SIGKILLed mid-trial and restarted."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

import pytest

from tests.cluster import rig
from tests.cluster.studies import make_study, mlflow_runs, optuna_trials, study_command, tail, trained, wait_all

pytestmark = pytest.mark.cluster
STEPS = 60
CKPT_EVERY = 10


def running_trial_pid(storage_url: str, run_dir: str) -> int | None:
    import optuna

    storage = optuna.storages.RDBStorage(storage_url)
    try:
        for summary in storage.get_all_studies():
            for t in storage.get_all_trials(
                storage.get_study_id_from_name(summary.study_name),
                deepcopy=False,
                states=(optuna.trial.TrialState.RUNNING,),
            ):
                if t.user_attrs.get("run_dir") == run_dir:
                    return int(t.user_attrs["worker"]["pid"])
    finally:
        storage.engine.dispose()
    return None


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


@pytest.mark.soak
def test_a_killed_and_restarted_worker_loses_no_trial(postgres, mlflow_server, rig_corpus, tmp_path):
    name = "rig-restart"
    grid = (1.9e-3, 3.8e-3)
    file = make_study(
        tmp_path,
        name,
        rig_corpus,
        grid,
        max_steps=STEPS,
        variants=1,
        ckpt_every_n_steps=CKPT_EVERY,
        val_every_n_steps=30,
        log_every_n_steps=1,
    )
    storage = postgres.url("optuna", host="127.0.0.1")
    command = study_command(file, storage, mlflow_server.url, tmp_path / "work")
    env = {
        **os.environ,
        "CEM_ABLATE_CACHE": str(tmp_path / "cache"),
        "HF_DATASETS_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PYTHONUNBUFFERED": "1",
    }
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]

    def start(i: int) -> subprocess.Popen:
        with open(logs[i], "ab") as out:  # each worker its own process group, as two shells would
            return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    workers = [start(0), start(1)]
    try:
        checkpoint = rig.wait_until(
            lambda: next((tmp_path / "work").rglob("last.ckpt"), None), 240, "a first checkpoint", interval=0.05
        )
        for w in workers:  # hold both still while we find whose trial it is
            signal_group(w, signal.SIGSTOP)
        run_dir = checkpoint.parent.parent
        assert not (run_dir / "result.json").exists()
        owner_pid = running_trial_pid(storage, str(run_dir))
        victim = next(i for i, w in enumerate(workers) if w.pid == owner_pid)
        signal_group(workers[victim], signal.SIGKILL)
        workers[victim].wait(30)
        signal_group(workers[1 - victim], signal.SIGCONT)
        workers[victim] = start(victim)  # the same command again
        assert wait_all(workers, 400, logs) == [0, 0], "\n".join(tail(p) for p in logs)
    finally:
        for w in workers:
            signal_group(w, signal.SIGCONT)
            rig.stop_group(w)

    trials = trained(optuna_trials(storage, name))
    states = sorted((t.slot, t.state, t.status) for t in trials)
    complete = [t.key for t in trials if t.state == "COMPLETE"]
    assert sorted(complete) == sorted({t.key for t in trials}) and len(complete) == len(grid), states
    assert len(trials) == len(grid) + 1 and len([t for t in trials if t.state == "FAIL"]) == 1, states

    client, runs = mlflow_runs(mlflow_server.url, name)
    assert len(runs.parents) == 1 and len(runs.children) == len(grid)  # one child per trial
    for child in runs.children:
        steps = runs.child_steps(client, child)
        assert child.info.status == "FINISHED" and max(steps) == STEPS - 1
        # Lightning logs a step's metrics after the step's callbacks, hence after the
        # checkpoint written there: killed in between, that one point is never logged.
        assert len(steps) >= STEPS - 1, sorted(steps)
        # Resumed from its checkpoint, not from step 0: the steps trained after that
        # checkpoint and before the kill are trained (and logged) again, fewer than one
        # checkpoint interval of them and none before the first checkpoint; a restart
        # from scratch would repeat every step from 0.
        repeated = sorted(s for s, n in steps.items() if n > 1)
        assert len(repeated) < CKPT_EVERY and all(s >= CKPT_EVERY for s in repeated), repeated
