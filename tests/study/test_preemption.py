"""Preemption of a real study (training.preemption): real processes, real signals.

SIGTERM (or SIGUSR1) to a study's process group mid-trial, as SLURM sends it before
SIGKILL: the process group exits well within 30 s, the trial in training has saved a
verified checkpoint at a step newer than the last periodic one and is WAITING again
(not FAIL), the coordinator names it in one line with that step, and rerunning the
same command (the requeued job) resumes it and ends with the uninterrupted run's
objective, bit for bit, every (metric, step) of its curves recorded once.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState

from cem_ablate.tracking.store import make_client
from cem_ablate.training.checkpoints import CheckpointFiles
from tests.study.test_coordinator import optuna_trials
from tests.study.tiny_study import write_study

CKPT_EVERY = 20


def _study_file(folder: Path, corpus, name: str, grid, steps: int) -> Path:
    path = write_study(
        folder, name=name, grid=grid, max_steps=steps, corpus=corpus, variants=[{"name": "llama"}], baselines={}
    )
    mapping = yaml.safe_load(path.read_text())
    mapping["base"]["train"].update(ckpt_every_n_steps=CKPT_EVERY, val_every_n_steps=30, log_every_n_steps=2)
    path.write_text(yaml.safe_dump(mapping))
    return path


def _start(path: Path, root: Path, workers: int = 1, env: dict | None = None, *options: str) -> subprocess.Popen:
    """`cem-ablate study` in its own process group (a batch job), its stores under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "cem_ablate.cli.main",
        "study",
        str(path),
        "--no-report",
        "--workers",
        str(workers),
        *options,
    ]
    return subprocess.Popen(
        cmd,
        cwd=root,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _run(path: Path, root: Path, workers: int = 1) -> str:
    proc = _start(path, root, workers)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    return out


def _signal_after_first_checkpoint(proc: subprocess.Popen, root: Path, signum: int, running: int = 1):
    """Send `signum` to the study's process group once a periodic checkpoint exists and
    `running` trials train; (seconds until the group exited, its output)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        folders = [CheckpointFiles(d) for d in root.rglob("checkpoints")]
        if sum(f.newest_step() is not None for f in folders) >= running:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signum)
    sent = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return time.monotonic() - sent, out


def _objectives(root: Path) -> dict[str, float]:
    return {
        t.user_attrs["slot"]: t.value
        for ts in optuna_trials(root).values()
        for t in ts
        if t.state == TrialState.COMPLETE
    }


def _child_histories(root: Path, experiment: str, tracking_uri: str | None = None) -> dict[str, dict[str, Counter]]:
    """slot -> metric -> how many points each step has, for every child run (each FINISHED)."""
    client = make_client(tracking_uri or f"sqlite:///{root / 'mlruns' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    out = {}
    for run in runs:
        if "mlflow.parentRunId" not in run.data.tags:
            continue
        assert run.info.status == "FINISHED", run.info
        out[run.data.tags["cem_ablate.slot"]] = {
            key: Counter(m.step for m in client.get_metric_history(run.info.run_id, key)) for key in run.data.metrics
        }
    return out


def _preempted(root: Path, out: str, signame: str) -> list[tuple[Path, int]]:
    """(run folder, step) of every trial the output says was preempted, checked against
    its checkpoints and its Optuna trial."""
    lines = [line for line in out.splitlines() if line.startswith("preempted: ")]
    assert lines, out[-3000:]
    found = []
    for line in lines:
        assert f"by {signame} at step " in line and "checkpoint saved, trial queued again" in line, line
        step = int(line.split(" at step ")[1].split(":")[0])
        assert step > CKPT_EVERY, line  # newer than the last periodic checkpoint
        (folder,) = [f for f in root.rglob("checkpoints") if CheckpointFiles(f).newest_step() == step]
        files = CheckpointFiles(folder)
        assert files.verified(warn=False) == files.last  # verified, and the newest
        assert not (folder.parent / "result.json").exists()
        found.append((folder.parent, step))
    states = Counter(t.state for ts in optuna_trials(root).values() for t in ts)
    assert states[TrialState.FAIL] == 0 and states[TrialState.WAITING] >= len(found), states
    return found


@pytest.mark.slow
def test_sigterm_mid_trial_saves_a_checkpoint_queues_the_trial_and_the_rerun_is_exact(tmp_path, corpus):
    path = _study_file(tmp_path, corpus, "preempted", [2e-3], steps=60)
    proc = _start(path, tmp_path / "job")
    seconds, out = _signal_after_first_checkpoint(proc, tmp_path / "job", signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert seconds < 30, seconds
    ((run_dir, step),) = _preempted(tmp_path / "job", out, "SIGTERM")
    assert "stopped by SIGTERM" in out
    print(f"SIGTERM: the process group exited {seconds:.1f} s after the signal; checkpoint at step {step}")

    _run(path, tmp_path / "job")  # the requeued job: the same command
    _run(path, tmp_path / "straight")
    resumed, uninterrupted = _objectives(tmp_path / "job"), _objectives(tmp_path / "straight")
    assert resumed == uninterrupted and len(resumed) == 1, (resumed, uninterrupted)  # bit for bit
    histories = _child_histories(tmp_path / "job", "preempted")
    reference = _child_histories(tmp_path / "straight", "preempted")
    for slot, metrics in histories.items():
        for key, steps in metrics.items():
            assert max(steps.values()) == 1, (slot, key, steps)  # no (metric, step) twice
        timed = ("tokens_per_sec", "mfu", "system/")  # sampled by the wall clock: steps depend on speed
        assert {k: set(v) for k, v in metrics.items() if not k.startswith(timed)} == {
            k: set(v) for k, v in reference[slot].items() if not k.startswith(timed)
        }  # none missing


@pytest.mark.slow
@pytest.mark.soak  # in CI the one-worker case: test_sigterm_mid_trial_saves_a_checkpoint_queues_the_trial...
def test_sigterm_to_a_two_worker_study_queues_every_trial_in_training(tmp_path, corpus):
    _two_workers(tmp_path, corpus, compare=False)


@pytest.mark.slow
@pytest.mark.soak
def test_sigterm_to_a_two_worker_study_then_the_rerun_is_exact(tmp_path, corpus):
    _two_workers(tmp_path, corpus, compare=True)


def _two_workers(tmp_path, corpus, compare: bool):
    path = _study_file(tmp_path, corpus, "preempted2", [2e-3, 4e-3], steps=60)
    proc = _start(path, tmp_path / "job", workers=2)
    seconds, out = _signal_after_first_checkpoint(proc, tmp_path / "job", signal.SIGTERM, running=2)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert seconds < 30, seconds
    preempted = _preempted(tmp_path / "job", out, "SIGTERM")
    # Every trial still training was preempted; on a loaded machine one worker may have
    # finished its trial before the other's first checkpoint (then only one was training).
    finished = len(_objectives(tmp_path / "job"))
    assert len(preempted) >= 1 and len(preempted) + finished == 2, out[-3000:]
    print(
        f"SIGTERM, 2 workers: exited {seconds:.1f} s after the signal; checkpoints at steps "
        f"{sorted(s for _, s in preempted)}"
    )
    again = _run(path, tmp_path / "job", workers=2)
    assert len(_objectives(tmp_path / "job")) == 2, again[-3000:]
    for slot, metrics in _child_histories(tmp_path / "job", "preempted2").items():
        assert all(max(steps.values()) == 1 for steps in metrics.values()), (slot, metrics)
    if compare:  # one thread per worker (the tiny study's execution.threads): the same float order
        _run(path, tmp_path / "straight")
        assert _objectives(tmp_path / "job") == _objectives(tmp_path / "straight")  # bit for bit


@pytest.mark.slow
@pytest.mark.soak  # in CI the same checkpoint-and-queue path under SIGTERM (the mid-trial test above)
def test_sigusr1_in_a_slurm_job_requeues_it_and_the_requeued_job_resumes(tmp_path, corpus):
    """`#SBATCH --signal=USR1@90`: SIGUSR1 before the time limit; the study checkpoints,
    queues its trial and runs `scontrol requeue <job>` (a stand-in on PATH records it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol-calls"
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    path = _study_file(tmp_path, corpus, "requeued", [3e-3], steps=60)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    proc = _start(path, tmp_path / "job", env=env)
    seconds, out = _signal_after_first_checkpoint(proc, tmp_path / "job", signal.SIGUSR1)
    assert proc.returncode == 128 + signal.SIGUSR1, out[-3000:]
    assert seconds < 30, seconds
    _preempted(tmp_path / "job", out, "SIGUSR1")
    assert calls.read_text().split() == ["requeue", "4242"]
    assert "requeued SLURM job 4242" in out
    again = _run(path, tmp_path / "job")
    assert len(_objectives(tmp_path / "job")) == 1, again[-3000:]


@pytest.mark.slow
def test_a_normal_study_records_each_metric_step_once(tmp_path, corpus, monkeypatch):
    """Lightning adds `epoch` to every dict it logs (the training step's and the
    validation's share a step), and the outcome repeats the final test metrics at the
    last step: each (metric, step) must still be recorded once."""
    from cem_ablate.cli.main import main

    path = _study_file(tmp_path, corpus, "once", [2e-3], steps=60)
    monkeypatch.chdir(tmp_path)
    assert main(["study", str(path), "--no-report"]) == 0
    (metrics,) = _child_histories(tmp_path, "once").values()
    assert {"epoch", "test_loss", "test_ppl", "val_loss", "train_loss", "objective"} <= metrics.keys()
    twice = {key: [s for s, n in steps.items() if n > 1] for key, steps in metrics.items()}
    assert not any(twice.values()), twice
    assert json.loads(next(tmp_path.rglob("result.json")).read_text())["steps"] == 60
