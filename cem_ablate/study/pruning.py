"""Optuna pruning on validation loss, as a Lightning callback handed to the engine.

At every validation the loss is reported to the trial at the current optimizer step;
when the pruner (median or successive halving, `lr_search.pruner`) says so, training
stops at the next step boundary and the trial is recorded as PRUNED. The engine
knows nothing about Optuna: it only runs the callback.

Under DDP only global rank 0 holds the trial and asks the pruner; the decision is
broadcast so every rank stops at the same step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lightning.pytorch.callbacks import Callback

if TYPE_CHECKING:
    import lightning.pytorch as pl
    import optuna


class OptunaPruning(Callback):
    def __init__(self, trial: optuna.Trial, monitor: str) -> None:
        self.trial = trial
        self.monitor = monitor
        self.pruned_step: int | None = None
        self.last_value: float | None = None

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        prune = False
        if trainer.is_global_zero and value is not None:
            number = float(value)
            if math.isfinite(number):
                self.last_value = number
                self.trial.report(number, step=trainer.global_step)
                prune = self.trial.should_prune()
        prune = bool(trainer.strategy.broadcast(prune, src=0))
        if prune:
            self.pruned_step = trainer.global_step
            trainer.should_stop = True


def pruning_callback(trial: optuna.Trial, monitor: str = "val_loss") -> OptunaPruning:
    return OptunaPruning(trial, monitor)
