"""`cem-ablate train` stopped by a signal (training.preemption): real processes.

SIGTERM mid-run: the run saves a verified checkpoint at its next optimizer step (newer
than the last periodic one), exits 143 without a result, and the rerun ends exactly
where the uninterrupted run does. With two DDP ranks a signal that reaches rank 1 alone
still stops both at the same step (one collective decision), rank 0 writing.
"""

import json
import signal
import time

import psutil
import pytest
import yaml

from cem_ablate.training.checkpoints import CheckpointFiles
from tests.cli.test_train_command import cli, write_config
from tests.data.conftest import isolated_cache  # noqa: F401  (session-wide autouse fixture)

CKPT_EVERY = 10


def _signal_after_first_checkpoint(config, uri, tmp_path, cache, signum, target=lambda proc: proc.pid):
    """Start `cem-ablate train`, send `signum` to `target(proc)` once a periodic checkpoint
    exists; (exit code, seconds to exit, stderr, run folder)."""
    proc = cli(config, "--tracking-uri", uri, cwd=tmp_path, env_cache=cache, wait=False)
    deadline = time.monotonic() + 600
    while True:
        folders = list(tmp_path.glob("runs/cli-*/checkpoints"))
        if folders and CheckpointFiles(folders[0]).newest_step() is not None:
            break
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.05)
    psutil.Process(target(proc)).send_signal(signum)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=120)
    return proc.returncode, time.monotonic() - sent, err.decode(), folders[0].parent


def _result(run_dir):
    return json.loads((run_dir / "result.json").read_text())


def _preempted_checkpoint(run_dir) -> int:
    files = CheckpointFiles(run_dir / "checkpoints")
    step = files.newest_step()
    assert step is not None and step % CKPT_EVERY != 0  # a step the periodic checkpoint does not write
    assert files.verified(warn=False) == files.last
    assert not (run_dir / "result.json").exists()
    return step


def _rerun_equals_uninterrupted(config, uri: str, tmp_path, cache, run_dir, keys) -> None:
    """Rerun the stopped run (it resumes its checkpoint) and run it once uninterrupted;
    `keys` of their results agree bit for bit."""
    rerun = cli(config, "--tracking-uri", uri, cwd=tmp_path, env_cache=cache)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    straight = cli(config, "--tracking-uri", uri, "--run-dir", tmp_path / "straight", cwd=tmp_path, env_cache=cache)
    assert straight.returncode == 0, straight.stderr[-3000:]
    resumed, uninterrupted = _result(run_dir), _result(tmp_path / "straight")
    for key in keys:
        assert resumed[key] == uninterrupted[key], key  # bit for bit


@pytest.mark.slow
@pytest.mark.soak  # in CI the same through a study: tests/study/test_preemption.py (rerun bit for bit)
def test_sigterm_saves_a_checkpoint_and_the_rerun_is_exact(tmp_path, isolated_cache):
    _sigterm_and_rerun(tmp_path, isolated_cache)


@pytest.mark.slow
@pytest.mark.soak
def test_sigterm_mid_accumulation_stops_at_the_optimizer_step(tmp_path, isolated_cache):
    """Two micro-batches per optimizer step: the signal lands in either, the checkpoint is
    taken after the optimizer step (a mid-accumulation one would lose the accumulated
    gradients and the rerun would differ)."""
    _sigterm_and_rerun(tmp_path, isolated_cache, effective_batch=16)


def _sigterm_and_rerun(tmp_path, cache, **train):
    config = write_config(
        tmp_path / "run.yaml", max_steps=40, ckpt_every_n_steps=CKPT_EVERY, val_every_n_steps=20, **train
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code, seconds, err, run_dir = _signal_after_first_checkpoint(config, uri, tmp_path, cache, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, err[-3000:]
    step = _preempted_checkpoint(run_dir)
    print(f"cem-ablate train, SIGTERM: exited {seconds:.1f} s after the signal, checkpoint at step {step}")

    _rerun_equals_uninterrupted(
        config, uri, tmp_path, cache, run_dir, ("steps", "test_loss", "test_ppl", "val_loss", "train_loss")
    )


@pytest.mark.slow
@pytest.mark.soak  # in CI DDP under a signal: test_a_ddp_run_launched_as_a_subprocess_gets_the_signal_relayed
def test_a_signal_to_one_ddp_rank_stops_every_rank_at_one_step(tmp_path, isolated_cache):
    config = write_config(
        tmp_path / "ddp.yaml",
        max_steps=30,
        ckpt_every_n_steps=CKPT_EVERY,
        val_every_n_steps=30,
        log_every_n_steps=2,
        devices=2,
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def rank_1(proc):  # Lightning's launcher starts rank 1 as a child of rank 0
        return psutil.Process(proc.pid).children()[0].pid

    code, seconds, err, run_dir = _signal_after_first_checkpoint(
        config, uri, tmp_path, isolated_cache, signal.SIGUSR1, target=rank_1
    )
    assert code == 128 + signal.SIGUSR1, err[-3000:]
    step = _preempted_checkpoint(run_dir)
    print(f"DDP, SIGUSR1 to rank 1: exited {seconds:.1f} s after the signal, checkpoint at step {step}")
    _rerun_equals_uninterrupted(
        config, uri, tmp_path, isolated_cache, run_dir, ("steps", "test_loss", "test_ppl", "val_loss")
    )
    assert yaml.safe_load(config.read_text())["train"]["devices"] == 2


LIBRARY_DDP = """
import sys, yaml
from cem_ablate.training.config import parse_run_config
from cem_ablate.training.engine import train_run
from cem_ablate.training.preemption import Preempted
try:
    config = parse_run_config(yaml.safe_load(open(sys.argv[1])))
    train_run(config, run_dir=sys.argv[2], tracking_uri=sys.argv[3], progress=False)
except Preempted as stop:
    print(f"stopped: {stop.signal_name} {stop.step}", flush=True)
    sys.exit(3)
"""


@pytest.mark.slow
@pytest.mark.soak  # in CI DDP itself (tests/cli/test_train_command.py) and SIGTERM through a study (tests/study/test_preemption.py)
def test_a_ddp_run_launched_as_a_subprocess_gets_the_signal_relayed(tmp_path, isolated_cache):
    """A library caller (the study's worker) runs DDP as `python -m cem_ablate.training.launch`:
    a SIGTERM to the caller alone reaches the ranks, which checkpoint; the caller raises
    `Preempted` with the checkpoint's step."""
    import os
    import subprocess
    import sys

    config = write_config(
        tmp_path / "ddp.yaml", max_steps=30, ckpt_every_n_steps=CKPT_EVERY, val_every_n_steps=30, devices=2
    )
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", LIBRARY_DDP, str(config), str(run_dir), f"sqlite:///{tmp_path / 'mlflow.db'}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, CEM_ABLATE_CACHE=str(isolated_cache)),
    )
    deadline = time.monotonic() + 600
    while CheckpointFiles(run_dir / "checkpoints").newest_step() is None:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # the caller only, not its process group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err[-3000:]
    step = _preempted_checkpoint(run_dir)
    assert out.strip() == f"stopped: SIGTERM {step}"
