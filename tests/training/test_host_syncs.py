"""No host sync on ordinary training steps (training = bench: a sync makes
the GPU wait for Python).

On a GPU, reading a tensor's value (`.item()`, `float(t)`, `bool(t)`, `.tolist()`)
makes Python wait for every queued kernel. The engine reads values only on check
steps (logging, validation, checkpoint, the last step); this test runs the real
engine on the CPU with those readers instrumented and counts the reads made while
each optimizer step ran (tests/cuda/test_training.py checks the same on a GPU with
`torch.cuda.set_sync_debug_mode`).
"""

from __future__ import annotations

import math
import traceback
from collections import defaultdict

import lightning as L
import pytest
import torch
from mlflow import MlflowClient

from cem_ablate.training.config import parse_run_config
from cem_ablate.training.engine import train_run
from tests.training.helpers import tiny_run

READERS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__")


class StepWindows(L.Callback):
    """The optimizer step in flight (1-based, the one the current batch completes),
    from a batch's start to the next batch's start (Lightning's own end-of-batch
    logging included), or to validation / the end of training."""

    def __init__(self):
        self.step: int | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.step = trainer.global_step + 1

    def on_validation_start(self, trainer, pl_module):
        self.step = None

    def on_train_end(self, trainer, pl_module):
        self.step = None


@pytest.fixture
def counted_reads(monkeypatch):
    windows = StepWindows()
    reads: dict[int, list[str]] = defaultdict(list)
    for name in READERS:
        original = getattr(torch.Tensor, name)

        def reader(self, *args, _original=original, _name=name, **kwargs):
            if windows.step is not None:
                frames = traceback.extract_stack(limit=6)[:-1]
                if frames[-1].name == "_get_value" and "torch/optim" in frames[-1].filename:
                    # AdamW's step counter: a CPU tensor unless the kernel is fused or
                    # capturable (fused on CUDA: training/optimizer.py), so no device wait
                    return _original(self, *args, **kwargs)
                reads[windows.step].append(
                    f"{_name} at "
                    + " < ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(frames))
                )
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, reader)
    return windows, reads


def test_ordinary_training_steps_read_no_tensor_values(tmp_path, tracking_uri, counted_reads):
    windows, reads = counted_reads
    cfg = parse_run_config(
        tiny_run(
            name="no-syncs",
            max_steps=12,
            log_every_n_steps=5,
            val_every_n_steps=12,
            ckpt_every_n_steps=12,
            val_batches=1,
            test_batches=1,
        )
    )
    result = train_run(
        cfg, run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False, extra_callbacks=[windows]
    )
    assert result.status == "finished" and math.isfinite(result.train_loss) and result.tokens_per_sec > 0
    check_steps = {5, 10, 12}  # logging every 5; validation, checkpoint and the end at 12
    bad = {s: sorted(set(r)) for s, r in reads.items() if s not in check_steps}
    assert not bad, bad
    assert reads[5] and reads[10]  # the instrument works: logging steps do read the loss
    # MFU reaches MLflow on the logging steps and, the last step not being one, at the end
    history = MlflowClient(tracking_uri).get_metric_history(result.mlflow_run_id, "mfu")
    assert {m.step for m in history} == {4, 9, 11} and all(0 < m.value < 1 for m in history)  # 0-based, as Lightning
    assert result.mfu == pytest.approx(max(history, key=lambda m: m.step).value, rel=1e-6)


def test_a_run_diverging_between_check_steps_reports_the_first_bad_step(tmp_path, tracking_uri):
    """The loss is checked on the device; the host learns of a non-finite one at the
    next check step, and reports the step it first happened at."""
    cfg = parse_run_config(
        tiny_run(
            name="diverge-late",
            lr=1e4,
            warmup_frac=0.0,
            max_steps=30,
            log_every_n_steps=7,
            val_every_n_steps=30,
            ckpt_every_n_steps=30,
        )
    )
    result = train_run(cfg, run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False)
    assert result.status == "diverged" and result.diverged_step is not None
    assert result.steps == result.diverged_step < 30 and math.isfinite(result.train_loss)
    assert not (tmp_path / "run" / "last.ckpt").exists() or result.diverged_step >= 30
