"""SwiGLU MLP sublayer of Llama (docs/design/layers.md#s1-llama-baseline): h + down(silu(gate(norm(h))) * up(norm(h)))."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cem_ablate.config.dims import ModelDims
from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.registry import register


@dataclass(frozen=True)
class SwiGLUOptions:
    pass


@register(
    "mlp",
    "llama",
    options=SwiGLUOptions,
    description="Llama SwiGLU MLP: gate_proj, up_proj, down_proj (three D x D_m matrices).",
)
class SwiGLU(nn.Module):
    supports_recursion = False

    def __init__(self, dims: ModelDims, options: SwiGLUOptions, steps: int = 1):
        super().__init__()
        d, m, std = dims.d_model, dims.d_mlp, dims.init_std
        self.norm = RMSNorm(d, dims.norm_eps)
        self.gate_proj = linear(d, m, std)
        self.up_proj = linear(d, m, std)
        self.down_proj = linear(m, d, std)

    # -- the step protocol (docs/design/energy-lens.md#s11-3-energy-transformer-block: a parallel block drives one step at a shared c) --
    def step_context(self, c: torch.Tensor) -> None:
        """Nothing is computed once per block: SwiGLU reads only its input."""
        return None

    def direction(self, u: torch.Tensor, ctx: None = None) -> torch.Tensor:
        """down(silu(gate(u)) * up(u)): the sublayer's increment at the normalized input u."""
        return self.down_proj(F.silu(self.gate_proj(u)) * self.up_proj(u))

    def step_energy(self, u: torch.Tensor, ctx) -> torch.Tensor:
        raise NotImplementedError(
            "SwiGLU descends no energy (docs/design/layers.md#s1-llama-baseline): it has no energy trace."
        )

    # -- incremental decoding (model/protocol.py IncrementalDecoding): position-wise, no state --
    def decode(self, h: torch.Tensor, past: None, position: int) -> tuple[torch.Tensor, None]:
        return self.forward(h), None

    def decode_context(self, c: torch.Tensor, past: None, position: int) -> tuple[None, None]:
        return None, None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = self.norm(h)
        return h + self.direction(x, self.step_context(x))

    def flops_per_token(self, seq_len: int) -> float:
        return 2 * 3 * self.gate_proj.in_features * self.gate_proj.out_features
