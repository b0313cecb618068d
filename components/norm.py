"""RMSNorm with a learnable gain (SPEC §1: eps 1e-5, gain init 1)."""

from __future__ import annotations

import torch
from torch import nn



class RMSNorm(nn.Module):
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
