"""The training recipe every task shares (docs/design/experiments.md#s7-training-recipe): optimizer, schedule, divergence stop.

AdamW with the model's parameter groups (decay on matrices and embeddings only;
`train.decay_preconditioner: true` moves the preconditioners' p, U, V into the decayed
group, as a plain AdamW setup would: docs/design/experiments.md#s7-training-recipe leaves them undecayed), lr warmup then cosine to `final_lr_frac` of the peak, stepped per optimizer step.
Gradient clipping (`train.grad_clip`, global norm) is the module's own, in
`configure_gradient_clipping`, not the Trainer's `gradient_clip_val`, which Lightning
refuses for a fused AdamW even under bf16-mixed (`training.optimizer`).

AdamW's kernel (fused on CUDA, torch's default elsewhere) comes from the device profile
(`training.device_profile`), which the engine resolves once per run and the benchmark's
step uses too.

Divergence: a non-finite training loss on any rank stops the run cleanly. All ranks
agree on it (one all-reduce of a flag), skip the update, record the step, and ask
the Trainer to stop; the engine then reports status `diverged` instead of raising.

No host sync on ordinary steps (reading the loss every step made the GPU wait for
Python, so training ran slower than the bench). The loss is watched on the
device: the first non-finite step and the last finite loss are kept in small tensors
and read only on *check steps*: steps that log (every `log_every_n_steps`), validate,
checkpoint, or end the run. Between two check steps a non-finite loss still updates
the weights (they become non-finite too); at the next check step the run stops with
`diverged_step` = the first non-finite step, exactly as an every-step check would
report it, and no checkpoint or validation ever sees the non-finite weights (those
steps are check steps).
"""

from __future__ import annotations

import math
from typing import Protocol, cast

import lightning as L
import torch
from lightning.pytorch.utilities.types import OptimizerLRScheduler
from torch import nn
from torch.optim import Optimizer

from cem_ablate import registry
from cem_ablate.training.budget import Budget
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.device_profile import DeviceProfile, resolve_device_profile
from cem_ablate.training.lightning_private import should_accumulate
from cem_ablate.training.optimizer import build_adamw, clip_gradients, parameters_device
from cem_ablate.training.schedule import warmup_cosine


class GroupedNetwork(Protocol):
    """What the recipe needs of a network beyond nn.Module (the language models and the GP regressor)."""

    def parameter_groups(self, weight_decay: float) -> list[dict]: ...


class RecipeModule(L.LightningModule):
    def __init__(self, model: nn.Module, train: TrainConfig, budget: Budget, profile: DeviceProfile | None = None):
        super().__init__()
        self.model = model
        self.train_cfg = train
        self.budget = budget
        self._profile = profile  # None: resolved for the device the parameters live on
        self.diverged_step: int | None = None  # optimizer steps completed when the loss went non-finite
        self.last_val_step: int | None = None  # global step of the latest validation
        # on-device watch of the training loss, read on check steps only (module docstring)
        self._first_bad_step: torch.Tensor | None = None  # -1 while every loss was finite
        self._last_finite_loss: torch.Tensor | None = None

    def configure_optimizers(self) -> OptimizerLRScheduler:
        t = self.train_cfg
        # torch's Module.__getattr__ types a method as Tensor | Module
        groups = cast(GroupedNetwork, self.model).parameter_groups(t.weight_decay)
        if t.decay_preconditioner:
            groups = decay_preconditioners(groups, self.model, t.weight_decay)
        optimizer = build_adamw(groups, lr=t.lr, betas=t.betas, eps=t.eps, kernel=self.device_profile.optimizer_kernel)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: warmup_cosine(step, self.budget.steps, self.budget.warmup_steps, t.final_lr_frac),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    @property
    def device_profile(self) -> DeviceProfile:
        """The run's device choices: the engine's, else resolved where the parameters live."""
        if self._profile is None:
            self._profile = resolve_device_profile(self.train_cfg, parameters_device(self.model).type)
        return self._profile

    def configure_gradient_clipping(
        self,
        optimizer: Optimizer,
        gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip to `train.grad_clip` (global norm) before every optimizer step (module docstring);
        under fp16 Lightning has unscaled the gradients by now (a fused AdamW is refused there)."""
        clip_gradients(optimizer, self.device_profile.grad_clip)

    def checked_loss(self, loss: torch.Tensor) -> torch.Tensor | None:
        """The loss to optimize, or None (skip the update and stop) when a non-finite
        loss was seen; the host looks only on check steps (module docstring)."""
        self._watch(loss.detach())
        assert self._first_bad_step is not None  # _watch has just set it
        if not self.is_check_step():
            return loss
        bad = bool(self._first_bad_step >= 0)  # the one host sync of a check step
        if self.trainer.world_size > 1:
            bad = self.trainer.strategy.reduce_boolean_decision(bad, all=False)
        if bad:
            first = int(self._first_bad_step)
            self.diverged_step = first if first >= 0 else self.global_step  # another rank's loss went first
            self.trainer.should_stop = True
            return None
        if self.is_log_step():
            self._log_training(loss.detach().float().cpu())
        return loss

    def _log_training(self, loss: torch.Tensor) -> None:
        """Log a step's training metrics as host tensors: Lightning converts progress-bar
        metrics with `.item()` after *every* batch, which on a device tensor is a sync;
        on a host copy (made on this logging step, which syncs anyway) it is free. The
        bar only gets them when there is a bar."""
        bar = self.trainer.progress_bar_callback is not None
        self.log_dict(
            {"train_loss": loss, "lr": torch.tensor(self.current_lr())}, on_step=True, on_epoch=False, prog_bar=bar
        )
        extra = self.extra_training_metrics(loss)
        if extra:
            self.log_dict(extra, on_step=True, on_epoch=False)

    def extra_training_metrics(self, loss: torch.Tensor) -> dict[str, torch.Tensor]:
        """Task-specific metrics of a logged training step, from its (host) loss."""
        return {}

    def _watch(self, loss: torch.Tensor) -> None:
        """Device-side bookkeeping: first non-finite step, last finite loss (no sync)."""
        if self._first_bad_step is None or self._first_bad_step.device != loss.device:
            self._first_bad_step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self._last_finite_loss = torch.full((), math.nan, dtype=loss.dtype, device=loss.device)
        assert self._last_finite_loss is not None  # set with _first_bad_step, just above or earlier
        finite = torch.isfinite(loss)
        self._last_finite_loss = torch.where(finite, loss.to(self._last_finite_loss.dtype), self._last_finite_loss)
        newly_bad = (~finite) & (self._first_bad_step < 0)
        self._first_bad_step = torch.where(newly_bad, self.global_step, self._first_bad_step)

    @property
    def last_train_loss(self) -> float:
        """The last finite training loss (read at the end of a run: one sync)."""
        return math.nan if self._last_finite_loss is None else float(self._last_finite_loss)

    def _completing_step(self) -> int:
        """The optimizer step the current micro-batch completes (1-based), as Lightning's
        logger connector counts it when it decides to write (`should_update_logs`)."""
        return self.global_step + 1

    def _last_micro_batch(self) -> bool:
        """Whether this micro-batch ends an accumulation window (the optimizer steps):
        Lightning's own test, the one its logger connector uses."""
        return self.budget.accumulation == 1 or not should_accumulate(self.trainer)

    def is_log_step(self) -> bool:
        """The steps Lightning writes training metrics at (every `log_every_n_steps`)."""
        return self._last_micro_batch() and self._completing_step() % self.train_cfg.log_every_n_steps == 0

    def is_check_step(self) -> bool:
        """Steps the host looks at the loss: logging, validation, checkpoint, the last."""
        if not self._last_micro_batch():
            return False
        step, t = self._completing_step(), self.train_cfg
        return (
            step % t.log_every_n_steps == 0
            or step % t.val_every_n_steps == 0
            or step % t.ckpt_every_n_steps == 0
            or step >= self.budget.steps
        )

    def on_validation_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.last_val_step = self.global_step

    def current_lr(self) -> float:
        """The schedule's lr (under mup: the base lr, before the first group's multiplier)."""
        group = self.trainer.optimizers[0].param_groups[0]
        return group["lr"] / group.get("lr_multiplier", 1.0)

    @property
    def diverged(self) -> bool:
        return self.diverged_step is not None


def preconditioner_parameters(model: nn.Module) -> list[nn.Parameter]:
    """p, U, V of every registered preconditioner module in `model` (docs/design/layers.md#s4-preconditioners)."""
    kinds = tuple(
        spec.factory
        for spec in registry.all_specs()
        if spec.kind == "preconditioner" and isinstance(spec.factory, type)
    )
    return [p for m in model.modules() if isinstance(m, kinds) for p in m.parameters(recurse=False)]


def decay_preconditioners(groups: list[dict], model: nn.Module, weight_decay: float) -> list[dict]:
    """The same parameters with the preconditioners' moved into a decayed group."""
    moved = {id(p) for p in preconditioner_parameters(model)}
    if any("lr_multiplier" in g for g in groups):  # mup: each class keeps its multiplier, wd decoupled
        out = []
        for g in groups:
            keep = [p for p in g["params"] if id(p) not in moved]
            move = [p for p in g["params"] if id(p) in moved]
            out += [{**g, "params": keep}] if keep else []
            out += [{**g, "params": move, "weight_decay": weight_decay / g["lr_multiplier"]}] if move else []
        return out
    out = [{**g, "params": [p for p in g["params"] if id(p) not in moved]} for g in groups]
    out = [g for g in out if g["params"]]
    if moved:
        out.append({"params": preconditioner_parameters(model), "weight_decay": weight_decay})
    return out
