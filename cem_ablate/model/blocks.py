"""Building blocks the core and every component share (docs/design/layers.md#s1-llama-baseline): RMSNorm, linear init.

They live in the core because the model itself needs them (final norm, LM head) and
the parameter report recognizes norms by type; components import them from here, so
nothing in `cem_ablate/` depends on the component zoo.
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """RMSNorm with a learnable gain (docs/design/layers.md#s1-llama-baseline: eps 1e-5, gain init 1)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Low-precision inputs are normalized in float32 (as transformers does);
        # float64 stays float64 so the autograd identities hold to 1e-12.
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def linear(in_features: int, out_features: int, std: float) -> nn.Linear:
    """nn.Linear without bias, weights ~ N(0, std^2) (docs/design/layers.md#s1-llama-baseline init decision: std 0.02)."""
    layer = nn.Linear(in_features, out_features, bias=False)
    nn.init.normal_(layer.weight, mean=0.0, std=std)
    return layer
