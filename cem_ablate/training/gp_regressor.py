"""A regressor made of MLP sublayers, for GP regression (docs/design/experiments.md#s9-gaussian-process-study, Table 3).

    x (dim) -> input projection (D) -> n_layers x mlp sublayer [T steps] -> RMSNorm -> head (1)

The mlp sublayer is the registry component of `model.mlp` (name, steps, depth_mode,
preconditioner...), exactly as in a language model, applied to a length-1 "sequence";
attention is not used (the paper's Table 3 model is built from recursive CEM MLPs).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.model.config import ModelConfig
from cem_ablate.model.protocol import Sublayer
from cem_ablate.model.report import ModelReport


class GPRegressor(nn.Module):
    def __init__(self, model_cfg: ModelConfig, input_dim: int):
        super().__init__()
        dims = model_cfg.dims
        sub = model_cfg.mlp
        self.input_dim = input_dim
        self.d_model = dims.d_model
        self.repeats = sub.repeats
        self.input_proj = linear(input_dim, dims.d_model, dims.init_std)
        self.blocks = nn.ModuleList(
            sub.spec.factory(dims, sub.options, sub.recursion_steps) for _ in range(dims.n_layers)
        )
        self.norm = RMSNorm(dims.d_model, dims.norm_eps)
        self.head = linear(dims.d_model, 1, dims.init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.input_proj(x).unsqueeze(1)  # (B, 1, D): one-token sequences
        for block in self.blocks:
            for _ in range(self.repeats):
                h = block(h)
        return self.head(self.norm(h)).squeeze(-1).squeeze(-1)

    def parameter_groups(self, weight_decay: float) -> list[dict]:
        """Decay matrices only (docs/design/experiments.md#s7-training-recipe), as the language models do."""
        decay_ids = {id(m.weight) for m in self.modules() if isinstance(m, nn.Linear)}
        decay = [p for p in self.parameters() if id(p) in decay_ids]
        rest = [p for p in self.parameters() if id(p) not in decay_ids]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]

    def report(self) -> ModelReport:
        norms = {id(p) for m in self.modules() if isinstance(m, RMSNorm) for p in m.parameters()}
        by = {"input": self.input_proj.weight.numel(), "mlp": 0, "norms": 0, "head": self.head.weight.numel()}
        for p in self.blocks.parameters():
            by["norms" if id(p) in norms else "mlp"] += p.numel()
        by["norms"] += sum(p.numel() for p in self.norm.parameters())
        # each block is a registry sublayer (torch types a ModuleList's items as Module)
        flops = {
            f"blocks.{i}.mlp": self.repeats * cast(Sublayer, b).flops_per_token(1) for i, b in enumerate(self.blocks)
        }
        flops["input_proj"] = 2.0 * self.input_dim * self.d_model
        flops["head"] = 2.0 * self.d_model
        return ModelReport(sum(by.values()), by, float(sum(flops.values())), flops, seq_len=1)
