"""A Lightning Trainer configured from a run config and its device profile.

- accelerator, precision and strategy: the device profile's (`training.device_profile`:
  a GPU when there is one, bf16-mixed on GPUs that have it, DDP over devices x num_nodes
  > 1 with gloo on CPU and NCCL on GPU); Lightning handles torchrun / SLURM environments
  for multi-node;
- no `gradient_clip_val`: the module clips (`training.recipe`), since Lightning refuses
  to clip for a fused AdamW under mixed precision;
- validation every `val_every_n_steps` optimizer steps (the interval is counted in
  micro-batches, hence x accumulation), no sanity validation, test batches capped
  by `test_batches`;
- the data modules shard data across ranks themselves (`use_distributed_sampler`
  off) so the order stays a pure function of (seed, position), see data.sampler;
- checkpointing is the engine's `PeriodicCheckpoint` (atomic `last.ckpt`), not
  Lightning's ModelCheckpoint;
- under SLURM, Lightning's SLURM environment without its auto-requeue: a stop signal
  is the engine's (a verified checkpoint at a step boundary, `training.preemption`),
  never an `hpc_ckpt_<n>.ckpt` written from inside the signal handler.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import lightning as L
from lightning.pytorch.loggers import Logger

from cem_ablate.training.budget import Budget
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.device_profile import DeviceProfile


class _DropAdvertisement(logging.Filter):
    """Lightning advertises a cloud logger on every Trainer: noise in a study's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


_LIGHTNING_INFO = logging.getLogger("lightning.pytorch.utilities.rank_zero")
if not any(isinstance(f, _DropAdvertisement) for f in _LIGHTNING_INFO.filters):
    _LIGHTNING_INFO.addFilter(_DropAdvertisement())


def build_trainer(
    train: TrainConfig,
    budget: Budget,
    profile: DeviceProfile,
    *,
    default_root_dir: str,
    logger: Logger | None,
    callbacks: Sequence[L.Callback],
    progress_bar: bool,
) -> L.Trainer:
    callbacks = list(callbacks)
    if progress_bar:
        from lightning.pytorch.callbacks import RichProgressBar

        callbacks.append(RichProgressBar(leave=True))
    return L.Trainer(
        plugins=_cluster_environment(),
        accelerator=profile.accelerator,
        devices=train.devices,
        num_nodes=train.num_nodes,
        strategy=profile.strategy,
        precision=profile.precision,
        max_steps=budget.steps,
        accumulate_grad_batches=budget.accumulation,
        val_check_interval=train.val_every_n_steps * budget.accumulation,
        check_val_every_n_epoch=None,
        limit_val_batches=train.val_batches,
        limit_test_batches=train.test_batches,  # None: the whole split
        num_sanity_val_steps=0,
        log_every_n_steps=train.log_every_n_steps,
        logger=logger if logger is not None else False,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=progress_bar,
        enable_model_summary=False,
        use_distributed_sampler=False,
        default_root_dir=default_root_dir,
    )


def _cluster_environment() -> list:
    """The environment Lightning would pick under SLURM, its auto-requeue off (module docstring)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def is_terminal() -> bool:
    return sys.stdout.isatty()
