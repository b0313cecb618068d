"""AdamW as every training step builds it (docs/design/experiments.md#s7-training-recipe): the one place that picks its kernel.

The training recipe (`RecipeModule.configure_optimizers`) and the benchmark's step
(`bench.train_step.make_optimizer`) both build their optimizer here, so the bench
times the optimizer training runs.

Kernel: on CUDA, `fused=True` (one kernel for every parameter's update instead of
foreach's several multi-tensor passes; estimated a few percent of an 86M GPU step, see
docs/lab-notes/from-code-comments.md).
Elsewhere torch's own default, unchanged (on CPU the single-tensor loop: fused CPU
AdamW exists but would change CPU results and timings that earlier runs recorded).
Kept free of Lightning imports: the bench imports it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

import torch


def adamw_kernel_options(device: torch.device | str) -> dict[str, bool]:
    """Keyword arguments selecting AdamW's implementation for parameters on `device`."""
    if torch.device(device).type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters:
        return {"fused": True}
    return {}


def build_adamw(groups: Iterable[dict], *, lr: float, betas: tuple[float, float], eps: float,
                device: torch.device | str) -> torch.optim.AdamW:
    """AdamW over parameter groups (each with its own weight decay) living on `device`.

    A group with an `lr_multiplier` (model.parametrization: mup) steps at lr x that multiplier;
    the schedule scales every group's own lr, so the ratios hold throughout."""
    groups = [{**g, "lr": lr * g["lr_multiplier"]} if "lr_multiplier" in g else g for g in groups]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **adamw_kernel_options(device))


def parameters_device(module: torch.nn.Module) -> torch.device:
    """Where a module's parameters live (the device its optimizer steps on)."""
    first = next(module.parameters(), None)
    return first.device if first is not None else torch.device("cpu")
