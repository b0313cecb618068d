"""The training recipe every task shares (SPEC §7): optimizer, schedule, divergence stop.

AdamW with the model's parameter groups (decay on matrices and embeddings only;
`train.decay_preconditioner: true` moves the preconditioners' p, U, V into the decayed
group, as a plain AdamW setup would: SPEC §7 leaves them undecayed), lr warmup then cosine to `final_lr_frac` of the peak, stepped per optimizer step.
Gradient clipping is the Trainer's (`gradient_clip_val`).

Divergence: a non-finite training loss on any rank stops the run cleanly. All ranks
agree on it (one all-reduce of a flag), skip the update, record the step, and ask
the Trainer to stop; the engine then reports status `diverged` instead of raising.
"""

from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn

from cem_ablate import registry
from cem_ablate.training.budget import Budget
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.schedule import warmup_cosine


class RecipeModule(L.LightningModule):
    def __init__(self, model: nn.Module, train: TrainConfig, budget: Budget):
        super().__init__()
        self.model = model
        self.train_cfg = train
        self.budget = budget
        self.diverged_step: int | None = None  # optimizer steps completed when the loss went non-finite
        self.last_train_loss = math.nan
        self.last_val_step: int | None = None  # global step of the latest validation

    def configure_optimizers(self):
        t = self.train_cfg
        groups = self.model.parameter_groups(t.weight_decay)
        if t.decay_preconditioner:
            groups = decay_preconditioners(groups, self.model, t.weight_decay)
        optimizer = torch.optim.AdamW(groups, lr=t.lr, betas=t.betas, eps=t.eps)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: warmup_cosine(step, self.budget.steps, self.budget.warmup_steps, t.final_lr_frac),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def checked_loss(self, loss: torch.Tensor) -> torch.Tensor | None:
        """The loss to optimize, or None (skip the update and stop) when it is not finite."""
        bad = not bool(torch.isfinite(loss))
        if self.trainer.world_size > 1:
            bad = self.trainer.strategy.reduce_boolean_decision(bad, all=False)
        if bad:
            self.diverged_step = self.global_step
            self.trainer.should_stop = True
            return None
        self.last_train_loss = float(loss.detach())
        self.log_dict({"train_loss": loss.detach(), "lr": self.current_lr()}, on_step=True, on_epoch=False,
                      prog_bar=True)
        return loss

    def on_validation_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.last_val_step = self.global_step

    def current_lr(self) -> float:
        return self.trainer.optimizers[0].param_groups[0]["lr"]

    @property
    def diverged(self) -> bool:
        return self.diverged_step is not None


def preconditioner_parameters(model: nn.Module) -> list[nn.Parameter]:
    """p, U, V of every registered preconditioner module in `model` (SPEC §4)."""
    kinds = tuple(spec.factory for spec in registry.all_specs()
                  if spec.kind == "preconditioner" and isinstance(spec.factory, type))
    return [p for m in model.modules() if isinstance(m, kinds) for p in m.parameters(recurse=False)]


def decay_preconditioners(groups: list[dict], model: nn.Module, weight_decay: float) -> list[dict]:
    """The same parameters with the preconditioners' moved into a decayed group."""
    moved = {id(p) for p in preconditioner_parameters(model)}
    out = [{**g, "params": [p for p in g["params"] if id(p) not in moved]} for g in groups]
    out = [g for g in out if g["params"]]
    if moved:
        out.append({"params": preconditioner_parameters(model), "weight_decay": weight_decay})
    return out
