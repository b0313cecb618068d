"""Callbacks of the engine: throughput and MFU, atomic checkpoints, plain progress lines."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import lightning as L
import torch


class ThroughputMonitor(L.Callback):
    """Tokens/s and MFU over training time only (validation and checkpoints excluded).

    Rates are cumulative over this session (a resumed run restarts the clock) and
    handed to Lightning every batch, which writes them at its logging cadence.
    MFU = training FLOPs/token x tokens/s / peak FLOP/s of all devices together, with
    the model report's training count (forward + backward; 3 x forward unless a CEM
    sublayer differentiates only its last k steps, SPEC §2).
    """

    def __init__(self, tokens_per_micro_batch: int, tokens_per_step: int, train_flops_per_token: float,
                 peak_flops: float):
        self.tokens_per_micro_batch = tokens_per_micro_batch  # all ranks together
        self.tokens_per_step = tokens_per_step
        self.train_flops_per_token = train_flops_per_token
        self.peak_flops = peak_flops
        self.total_tokens = 0
        self.total_seconds = 0.0
        self._start: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._start is None:
            return
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        self.total_seconds += time.perf_counter() - self._start
        self.total_tokens += self.tokens_per_micro_batch
        self._start = None
        metrics = {"tokens_per_sec": self.tokens_per_sec,
                   "tokens_seen": float(trainer.global_step * self.tokens_per_step)}
        mfu = self.mfu
        if not math.isnan(mfu):
            metrics["mfu"] = mfu
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, rank_zero_only=True)

    @property
    def mfu(self) -> float:
        return self.train_flops_per_token * self.tokens_per_sec / self.peak_flops

    @property
    def tokens_per_sec(self) -> float:
        return self.total_tokens / self.total_seconds if self.total_seconds > 0 else math.nan


def save_checkpoint_atomically(trainer: L.Trainer, path: Path) -> None:
    """Write to a temporary name and rename, so a kill never leaves a torn last.ckpt.

    `trainer.save_checkpoint` is collective (every rank calls it, rank 0 writes).
    """
    tmp = path.with_name(path.name + ".tmp")
    trainer.save_checkpoint(tmp, weights_only=False)
    if trainer.is_global_zero:
        os.replace(tmp, path)
    trainer.strategy.barrier("checkpoint-rename")


class PeriodicCheckpoint(L.Callback):
    """`last.ckpt` every N optimizer steps, always at a step boundary (exact resume)."""

    def __init__(self, path: Path, every_n_steps: int):
        self.path = Path(path)
        self.every_n_steps = every_n_steps
        self._saved_step = -1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self._saved_step or step % self.every_n_steps or getattr(pl_module, "diverged", False):
            return
        self._saved_step = step
        save_checkpoint_atomically(trainer, self.path)


class PrintProgress(L.Callback):
    """One line every N steps when stdout is not a terminal (logs, CI, study workers)."""

    def __init__(self, total_steps: int, every_n_steps: int, stream=None):
        self.total_steps = total_steps
        self.every_n_steps = every_n_steps
        self.stream = stream or sys.stdout
        self._printed_step = -1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if not trainer.is_global_zero or step == self._printed_step or step % self.every_n_steps:
            return
        self._printed_step = step
        metrics = trainer.callback_metrics
        parts = [f"step {step}/{self.total_steps}"]
        for key in ("train_loss", "val_loss", "tokens_per_sec"):
            if key in metrics:
                parts.append(f"{key} {float(metrics[key]):.4g}")
        print("  ".join(parts), file=self.stream, flush=True)
