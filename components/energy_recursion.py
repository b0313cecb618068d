"""What every CEM sublayer shares: T descent steps with a step size, and an energy trace.

A CEM sublayer (SPEC §2-§3) maps the block input h to x^T by T steps
x^{t+1} = x^t + eta * P * (-grad E at u = RMSNorm(x^t)). Subclasses provide
`energy(x, h)`; this base holds eta (fixed or learnable) and, when tracking is on,
records the energy at each step's query state so users can see whether steps descend.
"""

from __future__ import annotations

import torch
from torch import nn


class EnergyRecursion(nn.Module):
    supports_recursion = True

    def __init__(self, steps: int, step_size: float, learnable_step_size: bool):
        super().__init__()
        self.steps = steps
        if learnable_step_size:
            self.step_size = nn.Parameter(torch.tensor(float(step_size)))
        else:
            self.step_size = float(step_size)
        self.track_energy = False
        self.energy_trace: list[float] = []

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def record_energy(self, u: torch.Tensor, h: torch.Tensor, step: int) -> None:
        """Mean energy over the batch at query state u before step `step` (step T: after the last)."""
        if step == 0:
            self.energy_trace = []
        self.energy_trace.append(float(self.energy(u, h).mean()))
