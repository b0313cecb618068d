"""What every CEM sublayer shares: T descent steps with a step size, and an energy trace.

A CEM sublayer (SPEC §2-§3) maps the block input h to x^T by T steps
x^{t+1} = x^t + eta * P * (-grad E at u = RMSNorm(x^t)). Subclasses provide
`energy(x, h)` and one step; this base holds eta (fixed or learnable), runs the
steps (optionally checkpointing each one) and, when tracking is on, records the
energy at each step's query state so users can see whether steps descend.

Memory-lean recursion: with `checkpoint_steps`, each step runs under
`torch.utils.checkpoint` (non-reentrant), so only the step inputs x^t (B, J, D)
are kept for backward and a step's activations (attention probabilities, MLP
hidden states) are recomputed when its gradient is needed. Activation memory then
grows by one (B, J, D) tensor per extra step instead of a full step's activations:
the paper ran out of memory at T >= 3 without it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class EnergyRecursion(nn.Module):
    supports_recursion = True

    def __init__(self, steps: int, step_size: float, learnable_step_size: bool,
                 checkpoint_steps: bool = False):
        super().__init__()
        self.steps = steps
        if learnable_step_size:
            self.step_size = nn.Parameter(torch.tensor(float(step_size)))
        else:
            self.step_size = float(step_size)
        self.checkpoint_steps = checkpoint_steps
        self.track_energy = False
        self.energy_trace: list[float] = []

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def scaled_readout(self, readout: torch.Tensor) -> torch.Tensor:
        """eta * readout: folding the step size into the (small) read-out matrix saves a
        pass over the (B, J, D) update; a fixed eta = 1 is skipped entirely."""
        if isinstance(self.step_size, float) and self.step_size == 1.0:
            return readout
        return readout * self.step_size

    def descend(self, h: torch.Tensor, step: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
        """x^T from x^0 = h, where `step(x, t)` returns x^{t+1}."""
        x = h
        checkpointed = self.checkpoint_steps and torch.is_grad_enabled()
        for t in range(self.steps):
            if self.track_energy:
                self.record_energy(self.norm(x), h, t)
            if checkpointed:
                x = checkpoint(step, x, t, use_reentrant=False)
            else:
                x = step(x, t)
        if self.track_energy:
            self.record_energy(self.norm(x), h, self.steps)
        return x

    @torch.no_grad()
    def record_energy(self, u: torch.Tensor, h: torch.Tensor, step: int) -> None:
        """Mean energy over the batch at query state u before step `step` (step T: after the last)."""
        if step == 0:
            self.energy_trace = []
        self.energy_trace.append(float(self.energy(u, h).mean()))
