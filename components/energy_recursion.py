"""What every CEM sublayer shares: T descent steps with a step size, and an energy trace.

A CEM sublayer (SPEC §2-§3) maps the block input h to its output by T steps
x^{t+1} = x^t + eta * P * (-grad E at u^t). Subclasses provide `energy(x, h)`, the
context c = RMSNorm(h) and one step; this base holds eta (fixed or learnable), runs the
steps (optionally checkpointing each one) and, when tracking is on, records the
energy at each step's query state so users can see whether steps descend.

Two readings of Algorithm 1 (SPEC §2 "[open reading, an option]", `recursion_state`):
- `raw` (SPEC's decision): x^0 = h, u^t = RMSNorm(x^t) (so u^0 = c); output x^T.
- `normalized` (the literal pseudo-code): x^0 = c, u^0 = c, u^t = RMSNorm(x^t) for
  t >= 1; output h + (x^T - x^0). At T = 1 both are h + step(c): identical.

Truncated backpropagation through the recursion (`backprop_steps: k`, SPEC §2
"[option]"): while autograd is recording, the first T - k updates run under
`torch.no_grad()` and their sum x^{T-k} - x^0 joins x^0 as a constant; x^0 (hence h),
the context and the keys/values keep their gradients through the last k steps,
which are differentiated as usual. The forward value does not change; the activations
of the first T - k steps are never stored, so memory is that of k steps.

Memory-lean recursion: with `checkpoint_steps`, each differentiated step runs under
`torch.utils.checkpoint` (non-reentrant), so only the step inputs x^t (B, J, D)
are kept for backward and a step's activations (attention probabilities, MLP
hidden states) are recomputed when its gradient is needed. Activation memory then
grows by one (B, J, D) tensor per extra step instead of a full step's activations:
the paper ran out of memory at T >= 3 without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from cem_ablate.config.schema import require


@dataclass(frozen=True)
class RecursionOptions:
    """The recursion options both CEM sublayers share (SPEC §2, §3)."""

    recursion_state: Literal["raw", "normalized"] = "raw"  # x^0 = h (SPEC decision) or c (Algorithm 1)
    backprop_steps: int | None = None  # differentiate the last k of T steps; null: all T

    def validate_recursion(self, path: str) -> None:
        require(self.backprop_steps is None or self.backprop_steps >= 1, f"{path}.backprop_steps",
                f"must be at least 1 (null: all steps), got {self.backprop_steps}.")

    def check_steps(self, steps: int, path: str) -> None:
        """Called by the model config with the component's recursion steps T."""
        require(self.backprop_steps is None or self.backprop_steps <= steps, f"{path}.backprop_steps",
                f"must be at most the recursion steps T = {steps} (1 under depth_mode: reuse), "
                f"got {self.backprop_steps}.")


class EnergyRecursion(nn.Module):
    supports_recursion = True

    def __init__(self, steps: int, step_size: float, learnable_step_size: bool,
                 checkpoint_steps: bool = False, recursion_state: str = "raw",
                 backprop_steps: int | None = None):
        super().__init__()
        self.steps = steps
        if learnable_step_size:
            self.step_size = nn.Parameter(torch.tensor(float(step_size)))
        else:
            self.step_size = float(step_size)
        self.checkpoint_steps = checkpoint_steps
        self.recursion_state = recursion_state
        self.backprop_steps = steps if backprop_steps is None else backprop_steps
        self.track_energy = False
        self.energy_trace: list[float] = []

    @property
    def frozen_steps(self) -> int:
        """T - k: the leading steps that carry no gradient."""
        return self.steps - self.backprop_steps

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def scaled_readout(self, readout: torch.Tensor) -> torch.Tensor:
        """eta * readout: folding the step size into the (small) read-out matrix saves a
        pass over the (B, J, D) update; a fixed eta = 1 is skipped entirely."""
        if isinstance(self.step_size, float) and self.step_size == 1.0:
            return readout
        return readout * self.step_size

    def descend(self, h: torch.Tensor, c: torch.Tensor,
                step: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
        """The sublayer output from h and its context c, where `step(x, t)` returns x^{t+1}
        (a step takes u^0 = c at t = 0 under both readings)."""
        normalized = self.recursion_state == "normalized"
        x0 = c if normalized else h
        x = x0
        frozen = self.frozen_steps if torch.is_grad_enabled() else 0
        if frozen:
            with torch.no_grad():
                for t in range(frozen):
                    self._record(x, c, h, t)
                    x = step(x, t)
                moved = x - x0
            x = x0 + moved  # a constant offset: gradients reach x^0 with Jacobian I
        checkpointed = self.checkpoint_steps and torch.is_grad_enabled()
        for t in range(frozen, self.steps):
            self._record(x, c, h, t)
            if checkpointed:
                x = checkpoint(step, x, t, use_reentrant=False)
            else:
                x = step(x, t)
        self._record(x, c, h, self.steps)
        return h + (x - x0) if normalized else x

    def _record(self, x: torch.Tensor, c: torch.Tensor, h: torch.Tensor, t: int) -> None:
        if self.track_energy:
            self.record_energy(c if t == 0 else self.norm(x), h, t)

    @torch.no_grad()
    def record_energy(self, u: torch.Tensor, h: torch.Tensor, step: int) -> None:
        """Mean energy over the batch at query state u before step `step` (step T: after the last)."""
        if step == 0:
            self.energy_trace = []
        self.energy_trace.append(float(self.energy(u, h).mean()))

    # -- FLOPs (cem_ablate.model.report) ------------------------------------------------
    def flops_once(self, seq_len: int) -> float:
        """Forward FLOPs per token computed once per block (context projections)."""
        raise NotImplementedError

    def flops_per_step(self, seq_len: int) -> float:
        raise NotImplementedError

    def flops_per_token(self, seq_len: int) -> float:
        return self.flops_once(seq_len) + self.steps * self.flops_per_step(seq_len)

    def backward_flops_per_token(self, seq_len: int) -> float:
        """2x the forward FLOPs of what is differentiated: the frozen steps have no backward."""
        return 2.0 * (self.flops_once(seq_len) + self.backprop_steps * self.flops_per_step(seq_len))
