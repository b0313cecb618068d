"""Callbacks of the engine: throughput and MFU, periodic checkpoints, plain progress lines.

None of them waits for the device on an ordinary step (a sync would make the GPU wait for
Python, `training.recipe`): they act on the logging and checkpoint steps, where a sync
happens anyway."""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import lightning as L
import torch
from lightning.pytorch.utilities.types import STEP_OUTPUT

from cem_ablate.training.lightning_private import should_accumulate

if TYPE_CHECKING:
    from cem_ablate.training.checkpoints import CheckpointFiles


class ThroughputMonitor(L.Callback):
    """Tokens/s and MFU over training time only (validation and checkpoints excluded),
    without a host sync on ordinary steps (a sync would make the GPU wait for Python).

    Time is measured in *spans* of consecutive training batches. A span opens at a
    batch's start and closes, with one device sync, on steps that sync anyway (those
    Lightning logs at, every `log_every_n_steps`; checkpoint steps, before the
    checkpoint is written), before validation, and at the end of training; no other
    step waits for the device. The first optimizer step of a session (compilation,
    allocator and autotuning warm-up) is a span of its own that counts only when nothing
    else was measured, so a short run still has a rate, and a long one reports the
    steady rate the bench measures.

    Rates are cumulative over this session (a resumed run restarts the clock) and are
    logged on the logging steps (`tokens_per_sec`, `mfu`, `tokens_seen`).
    MFU = training FLOPs/token x tokens/s / peak FLOP/s of all devices together, with
    the model report's training count (forward + backward; 3 x forward unless a CEM
    sublayer differentiates only its last k steps, docs/design/layers.md#s2-cem-attention).
    """

    def __init__(
        self,
        tokens_per_micro_batch: int,
        tokens_per_step: int,
        train_flops_per_token: float,
        peak_flops: float,
        log_every_n_steps: int = 1,
        ckpt_every_n_steps: int | None = None,
    ) -> None:
        self.tokens_per_micro_batch = tokens_per_micro_batch  # all ranks together
        self.tokens_per_step = tokens_per_step
        self.train_flops_per_token = train_flops_per_token
        self.peak_flops = peak_flops
        self.log_every_n_steps = log_every_n_steps
        self.ckpt_every_n_steps = ckpt_every_n_steps
        self.total_tokens = 0  # steady spans
        self.total_seconds = 0.0
        self.warmup_tokens = 0  # the session's first optimizer step
        self.warmup_seconds = 0.0
        self._span_start: float | None = None
        self._span_tokens = 0
        self._first_step: int | None = None  # global step when this session started
        self._closed_step = -1

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._first_step is None:
            self._first_step = trainer.global_step
        if self._span_start is None:
            self._span_start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
        if self._span_start is None:
            return
        self._span_tokens += self.tokens_per_micro_batch
        step = trainer.global_step
        if step == self._closed_step or should_accumulate(trainer):
            return  # mid-accumulation, or this step's span is already closed
        assert self._first_step is not None  # set with the span, in on_train_batch_start
        warmup = step == self._first_step + 1
        logs = step % self.log_every_n_steps == 0
        checkpoints = self.ckpt_every_n_steps is not None and step % self.ckpt_every_n_steps == 0
        if warmup or logs or checkpoints:
            self._close(pl_module.device, warmup=warmup)
            self._closed_step = step
        if logs:
            metrics = {"tokens_per_sec": self.tokens_per_sec, "tokens_seen": float(step * self.tokens_per_step)}
            mfu = self.mfu
            if not math.isnan(mfu):
                metrics["mfu"] = mfu
            pl_module.log_dict(metrics, on_step=True, on_epoch=False, rank_zero_only=True)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close(pl_module.device)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Close the last span; when the last step was not a logging step, write the
        final rates to the logger (MLflow) at that step, so every run has `mfu`."""
        self._close(pl_module.device)
        step = trainer.global_step
        if step % self.log_every_n_steps and trainer.is_global_zero and trainer.logger is not None:
            metrics = {"tokens_per_sec": self.tokens_per_sec, "mfu": self.mfu}
            # step - 1: Lightning writes step N's metrics at index N - 1 (`_batches_that_stepped`)
            trainer.logger.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)}, step=step - 1)

    def _close(self, device: torch.device, warmup: bool = False) -> None:
        if self._span_start is None:
            return
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the span's queued work is part of its time
        seconds = time.perf_counter() - self._span_start
        if warmup:
            self.warmup_seconds += seconds
            self.warmup_tokens += self._span_tokens
        else:
            self.total_seconds += seconds
            self.total_tokens += self._span_tokens
        self._span_start, self._span_tokens = None, 0

    @property
    def mfu(self) -> float:
        return self.train_flops_per_token * self.tokens_per_sec / self.peak_flops

    @property
    def tokens_per_sec(self) -> float:
        """Steady rate (warm-up excluded); the warm-up step's rate when that is all there is."""
        if self.total_seconds > 0:
            return self.total_tokens / self.total_seconds
        return self.warmup_tokens / self.warmup_seconds if self.warmup_seconds > 0 else math.nan


class PeriodicCheckpoint(L.Callback):
    """A checkpoint every N optimizer steps, always at a step boundary (exact resume),
    with its digest (`training.checkpoints`)."""

    def __init__(self, files: CheckpointFiles, every_n_steps: int) -> None:
        self.files = files
        self.every_n_steps = every_n_steps
        self._saved_step = -1

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step == self._saved_step or step % self.every_n_steps or getattr(pl_module, "diverged", False):
            return
        self._saved_step = step
        self.files.save(trainer)


class PrintProgress(L.Callback):
    """One line every N steps when stdout is not a terminal (logs, CI, study workers)."""

    def __init__(self, total_steps: int, every_n_steps: int, stream: TextIO | None = None) -> None:
        self.total_steps = total_steps
        self.every_n_steps = every_n_steps
        self.stream = stream or sys.stdout
        self._printed_step = -1

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
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
