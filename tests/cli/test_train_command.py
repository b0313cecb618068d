"""`cem-ablate train` as a user runs it: DDP on 2 CPU processes, kill -9 and rerun, bad input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from cem_ablate.training.config import parse_run_config
from cem_ablate.training.engine import train_run
from tests.data.conftest import isolated_cache  # noqa: F401  (session-wide autouse fixture)
from tests.training.helpers import tiny_run


def cli(*args, cwd, env_cache, wait=True):
    env = dict(os.environ, CEM_ABLATE_CACHE=str(env_cache), MLFLOW_DISABLE_TELEMETRY="true")
    command = [sys.executable, "-m", "cem_ablate.cli.main", "train", *map(str, args), "--no-progress"]
    if not wait:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def write_config(path: Path, **train) -> Path:
    path.write_text(yaml.safe_dump(tiny_run(name="cli", **train)))
    return path


def runs_of(uri: str, experiment: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id]) if exp else []


@pytest.mark.slow
@pytest.mark.soak  # in CI DDP through the CLI, one MLflow run: tests/training/test_device_profile.py (the CUDA profile)
def test_two_process_ddp_on_cpu_logs_one_run(tmp_path, isolated_cache):
    config = write_config(tmp_path / "ddp.yaml", max_steps=20, val_every_n_steps=10, log_every_n_steps=2, devices=2)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = cli(config, "--tracking-uri", uri, cwd=tmp_path, env_cache=isolated_cache)
    assert done.returncode == 0, done.stderr[-3000:]
    client, runs = runs_of(uri, "cli")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    history = client.get_metric_history(runs[0].info.run_id, "train_loss")
    steps = [m.step for m in history]
    assert len(steps) == len(set(steps)) > 3  # logged once, by rank 0 only
    assert history[-1].value < history[0].value
    result = json.loads(next(tmp_path.glob("runs/cli-*/result.json")).read_text())
    assert result["status"] == "finished" and result["tokens_seen"] == 20 * 16 * 64  # 2 ranks x 8


def kill_9_once_written(config, uri: str, tmp_path, cache, checkpoint: str, timeout: float = 600):
    """Start `cem-ablate train config`, kill -9 it once checkpoints/<checkpoint> exists; its run folder."""
    process = cli(config, "--tracking-uri", uri, cwd=tmp_path, env_cache=cache, wait=False)
    deadline = time.time() + timeout
    while not list(tmp_path.glob(f"runs/cli-*/checkpoints/{checkpoint}")):
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        assert time.time() < deadline, f"no {checkpoint} within {timeout:.0f} s"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    run_dir = next(tmp_path.glob("runs/cli-*"))
    assert not (run_dir / "result.json").exists()  # killed mid-run
    return run_dir


@pytest.mark.slow
@pytest.mark.soak
def test_kill_9_and_rerun_ends_like_the_uninterrupted_run(tmp_path, isolated_cache):
    config = write_config(tmp_path / "run.yaml", max_steps=40, ckpt_every_n_steps=10, val_every_n_steps=20)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = kill_9_once_written(config, uri, tmp_path, isolated_cache, "last.ckpt")

    rerun = cli(config, "--tracking-uri", uri, cwd=tmp_path, env_cache=isolated_cache)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Restored all states" in rerun.stderr
    resumed = json.loads((run_dir / "result.json").read_text())

    straight = train_run(
        parse_run_config(yaml.safe_load(config.read_text())),
        run_dir=tmp_path / "straight",
        tracking_uri=f"sqlite:///{tmp_path / 'other.db'}",
        progress=False,
    )
    assert resumed["status"] == "finished" and resumed["steps"] == 40
    assert resumed["test_loss"] == pytest.approx(straight.test_loss, abs=1e-4)
    assert resumed["val_loss"] == pytest.approx(straight.val_loss, abs=1e-4)
    _, runs = runs_of(uri, "cli")
    assert len(runs) == 1  # the rerun continued the killed run's MLflow run


def test_bad_config_is_one_line_and_touches_nothing(tmp_path, isolated_cache):
    config = write_config(tmp_path / "bad.yaml")
    done = cli(config, "train.lr=-1", cwd=tmp_path, env_cache=isolated_cache)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: train.lr: must be positive, got -1.0."
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlruns").exists()


def test_dry_run_prints_the_resolved_run(tmp_path, isolated_cache):
    config = write_config(tmp_path / "dry.yaml")
    done = cli(
        config,
        "model.size=86M",
        "model.vocab_size=32000",
        "train.max_steps=null",
        "train.token_budget=chinchilla",
        "--dry-run",
        cwd=tmp_path,
        env_cache=isolated_cache,
    )
    assert done.returncode == 0, done.stderr
    assert "1,727,429,760 tokens (chinchilla" in done.stdout  # 20 x 86,371,488 (the paper's vocabulary)
    assert "parameters:" in done.stdout and "training FLOPs" in done.stdout
    assert not (tmp_path / "runs").exists()


def test_a_dead_tracking_server_is_one_error_line_before_training(tmp_path, isolated_cache):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = cli(
        write_config(tmp_path / "dead.yaml"),
        "--tracking-uri",
        f"http://127.0.0.1:{port}",
        cwd=tmp_path,
        env_cache=isolated_cache,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: --tracking-uri: cannot reach the MLflow server http://127.0.0.1:{port}: [Errno 111] Connection refused"
    ]
    assert not (tmp_path / "runs").exists()
