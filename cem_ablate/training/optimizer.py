"""AdamW and gradient clipping as every training step runs them (docs/design/experiments.md#s7-training-recipe).

The training recipe (`RecipeModule`) and the benchmark's step (`bench.train_step`) both
build their optimizer and clip their gradients here, with the hyper-parameters of
`TrainConfig` and the kernel of the device profile (`training.device_profile`), so the
bench times the optimizer training runs.

Clipping is the module's own, not Lightning's `gradient_clip_val`: Lightning's mixed
precision plugin refuses to clip for any optimizer that unscales gradients itself
(fused AdamW), also under bf16-mixed, where there is no scaler and nothing to unscale.
Kept free of Lightning imports: the bench imports it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from cem_ablate.training.device_profile import adamw_kernel_options


def build_adamw(
    groups: Iterable[dict], *, lr: float, betas: tuple[float, float], eps: float, kernel: str
) -> torch.optim.AdamW:
    """AdamW over parameter groups (each with its own weight decay), with the resolved
    `kernel` (fused | foreach | single, `device_profile.resolve_optimizer_kernel`).

    A group with an `lr_multiplier` (model.parametrization: mup) steps at lr x that multiplier;
    the schedule scales every group's own lr, so the ratios hold throughout."""
    groups = [{**g, "lr": lr * g["lr_multiplier"]} if "lr_multiplier" in g else g for g in groups]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **adamw_kernel_options(kernel))


def clip_gradients(optimizer: torch.optim.Optimizer, max_norm: float) -> None:
    """Scale the gradients of `optimizer`'s parameters to a global norm of at most
    `max_norm` (0: no clipping). The parameters in the optimizer's order and torch's
    default kernel choice, exactly as Lightning's `gradient_clip_val` clipped them, so CPU
    results stay bit-identical to runs made before clipping moved here."""
    if max_norm > 0:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, max_norm)


def parameters_device(module: torch.nn.Module) -> torch.device:
    """Where a module's parameters live (the device its optimizer steps on)."""
    first = next(module.parameters(), None)
    return first.device if first is not None else torch.device("cpu")
