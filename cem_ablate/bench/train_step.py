"""One training step, the unit the benchmark times: forward, loss, backward, clip, AdamW.

This is a plain PyTorch loop with the same math and the same code as the training
engine's step (cem_ablate.training): the head + loss unit (`training.head_loss`: final
norm, LM head and next-token cross-entropy on float32 logits; `auto` = chunked on
CUDA, plain on CPU), gradient clipping and AdamW from `training.optimizer` with the
training recipe's own hyper-parameters (`TrainConfig`'s betas, eps, weight decay on
matrices and embeddings only, clip norm: docs/design/experiments.md#s7-training-recipe) and the device profile's kernel
(`training.device_profile`: fused on CUDA), under `torch.autocast(bfloat16)` for bf16
("bf16-mixed"). Only the learning rate is the bench's own: speed does not depend on it.
Lightning's per-step bookkeeping is left out so the numbers measure the model
(`bench.train_parity` measures what it costs).

`compiled` mode compiles each block with `fullgraph=True` (the engine's
`train.compile` also compiles per block) and the head + loss unit as one graph, so a
graph break fails loudly. The external reference (HF Llama) returns logits and takes
the plain cross-entropy.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from cem_ablate.bench.profile import LOSS_RANGE, OPTIMIZER_RANGE
from cem_ablate.model.transformer import CEMTransformer
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.device_profile import resolve_device_profile
from cem_ablate.training.head_loss import HeadLoss, head_loss_unit, resolve_loss_impl
from cem_ablate.training.optimizer import build_adamw, clip_gradients, parameters_device

BENCH_LR = 1e-4  # the bench's only own hyper-parameter: a step's speed does not depend on it
RECIPE = TrainConfig()  # the training recipe's defaults: betas, eps, weight decay, clip norm


class _Grouped(Protocol):
    """A model that says its own weight-decay groups (`CEMTransformer.parameter_groups`)."""

    def parameter_groups(self, weight_decay: float) -> list[dict]: ...


def decay_groups(model: nn.Module, weight_decay: float = RECIPE.weight_decay) -> list[dict]:
    """docs/design/experiments.md#s7-training-recipe groups for any model: `parameter_groups` when it has one, else the same
    rule (decay the weights of nn.Linear / nn.Embedding) for transformers models."""
    if hasattr(model, "parameter_groups"):
        # cast: torch's Module.__getattr__ types every attribute as Tensor | Module
        return cast(_Grouped, model).parameter_groups(weight_decay)
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Linear, nn.Embedding))}
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if id(p) in matrices], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) not in matrices], "weight_decay": 0.0},
    ]


def compiled_forward(model: CEMTransformer) -> Callable[[torch.Tensor], torch.Tensor]:
    """The model's hidden states (before the final norm) with every block compiled
    (fullgraph) and shared weights; the head + loss unit follows (`head_loss_for`)."""
    # dynamic=False: a run compiles one model at one shape; without it, a bench that
    # compiles several sizes in one process would get shape-generic (slower) graphs.
    blocks = [torch.compile(block, fullgraph=True, dynamic=False) for block in model.blocks]

    def forward(input_ids: torch.Tensor) -> torch.Tensor:
        # run_blocks: the residual stream, or the velocity stream (x, v) of docs/design/energy-lens.md#s11-2-velocity-stream
        return model.run_blocks(model.embed_tokens(input_ids), blocks)

    return forward


def head_loss_for(model: nn.Module, device: torch.device, compiled: bool, loss_impl: str = "auto") -> HeadLoss:
    """The training engine's head + loss unit for this device (compiled as one graph
    in compiled mode, as `train.compile` does)."""
    return head_loss_unit(model, resolve_loss_impl(loss_impl, device.type), compile=compiled)


def hf_forward(hf_model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(input_ids: torch.Tensor) -> torch.Tensor:
        return hf_model(input_ids=input_ids, use_cache=False).logits

    return forward


class TrainStep:
    """A callable doing one optimizer step on a fixed batch of token ids (B, J + 1).

    With `head_loss`, `forward` returns hidden states and the unit turns them into the
    loss (the models of this project); without it, `forward` returns logits and the
    plain cross-entropy follows (the HF reference, or a model called whole)."""

    def __init__(
        self,
        model: nn.Module,
        forward: Callable[[torch.Tensor], torch.Tensor],
        optimizer: torch.optim.Optimizer,
        precision: str,
        device: torch.device,
        head_loss: HeadLoss | None = None,
    ):
        self.model = model
        self.forward = forward
        self.head_loss = head_loss
        self.optimizer = optimizer
        self.device = device
        self.autocast = (
            (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if precision == "bf16" else nullcontext
        )

    def __call__(self, batch: torch.Tensor) -> float | torch.Tensor:
        """The step's loss: a float on CPU; on CUDA the detached loss tensor, since
        reading it would make every step wait for the GPU (the timer synchronizes)."""
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with self.autocast():
            out = self.forward(inputs)
            with record_function(LOSS_RANGE):  # ranges name the step's parts in a profile (bench/profile.py)
                if self.head_loss is not None:
                    loss = self.head_loss(out, targets)
                else:
                    loss = F.cross_entropy(out.flatten(0, 1).float(), targets.flatten())
        loss.backward()
        with record_function(OPTIMIZER_RANGE):
            clip_gradients(self.optimizer, RECIPE.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss.detach() if loss.is_cuda else float(loss.detach())

    def state_bytes(self) -> int:
        """Bytes held between steps: weights and optimizer state (grads are freed)."""
        tensors: dict[int, torch.Tensor] = {id(p): p for p in self.model.parameters()}
        for state in self.optimizer.state.values():
            tensors.update({id(t): t for t in state.values() if torch.is_tensor(t)})
        return sum(t.numel() * t.element_size() for t in tensors.values())


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """AdamW as training builds it: the recipe's hyper-parameters, the device profile's
    kernel for the device the model lives on (fused on CUDA)."""
    kernel = resolve_device_profile(RECIPE, parameters_device(model).type).optimizer_kernel
    return build_adamw(decay_groups(model), lr=BENCH_LR, betas=RECIPE.betas, eps=RECIPE.eps, kernel=kernel)
