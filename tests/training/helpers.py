"""Tiny run configs: seconds per run on 2 CPU cores."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import lightning as L

UNIFORM_BYTE_PPL = 257.0  # perplexity of the uniform distribution over the byte vocabulary


def tiny_run(name: str = "tiny-test", **train) -> dict:
    cfg = {
        "name": name,
        "model": {"size": "tiny"},
        "train": {
            "lr": 3e-3,
            "batch_size": 8,
            "max_steps": 40,
            "val_every_n_steps": 20,
            "val_batches": 4,
            "test_batches": 8,
            "ckpt_every_n_steps": 10,
            "log_every_n_steps": 5,
        },
        "data": {"block_size": 64},
    }
    cfg["train"].update(train)
    return copy.deepcopy(cfg)


class RecordLosses(L.Callback):
    """Training loss per optimizer step, as the module returned it."""

    def __init__(self):
        self.losses: dict[int, float] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if outputs is not None:
            self.losses[trainer.global_step] = float(outputs["loss"])


class CrashAt(L.Callback):
    """Raise after optimizer step `step`, like a crash between checkpoints."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError(f"simulated crash after step {self.step}")


def cli_process(*args, cwd, cache, timeout: float = 600) -> subprocess.CompletedProcess:
    """`cem-ablate ARGS` as a user runs it: its own process, this test's cache, output captured."""
    env = dict(os.environ, CEM_ABLATE_CACHE=str(cache), MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
