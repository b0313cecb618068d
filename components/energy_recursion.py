"""What every CEM sublayer shares: T descent steps with a step size, and an energy trace.

A CEM sublayer (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp) maps the block input h to its output by T steps
x^{t+1} = x^t + eta * P * (-grad E at u^t). Subclasses provide `norm`, `energy(x, h)`
and the step protocol below; this base holds eta (fixed or learnable) and mu, runs the
steps (optionally checkpointing each one) and, when tracking is on, records the
energy at each step's query state so users can see whether steps descend.

Two readings of Algorithm 1 (docs/design/layers.md#s2-cem-attention "[open reading, an option]", `recursion_state`):
- `raw` (the design's decision, docs/design/layers.md#s2-cem-attention): x^0 = h, u^t = RMSNorm(x^t) (so u^0 = c); output x^T.
- `normalized` (the literal pseudo-code): x^0 = c, u^0 = c, u^t = RMSNorm(x^t) for
  t >= 1; output h + (x^T - x^0). At T = 1 both are h + step(c): identical.

Truncated backpropagation through the recursion (`backprop_steps: k`, docs/design/layers.md#s2-cem-attention
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

Momentum over the steps (docs/design/energy-lens.md#s11-1-momentum, `update: heavy_ball | nesterov`): the state is
(x, v) with v^0 = 0, v^{t+1} = mu v^t + eta Delta(u^t), x^{t+1} = x^t + v^{t+1}, where
Nesterov queries the look-ahead u^t = RMSNorm(x^t + mu v^t) (u^0 = c always). Frozen
steps make x and v constants; checkpointing saves (x^t, v^t) per step. `gd`, T = 1
(v^0 = 0 and u^0 = c, so mu never enters) and a fixed mu = 0 are gradient descent
exactly, and run gd's loop, so they are bit-identical to it.

The step protocol a subclass provides (also what a joint-step block drives, docs/design/energy-lens.md#s11-3-energy-transformer-block):
`step_context(c)`, computed once per block from the context c = RMSNorm(h);
`direction(u, ctx)` = eta Delta(u), the preconditioned, step-size-scaled update at
query state u; `advance(x, u, ctx)` = x + direction(u, ctx) in gd's arithmetic order
(a subclass whose direction has two terms adds them to x one by one); and
`step_energy(u, ctx)`, the energy per sequence (B,) at u.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from cem_ablate.config.schema import require


@dataclass(frozen=True)
class RecursionOptions:
    """The recursion options every CEM sublayer shares (docs/design/layers.md#s2-cem-attention, docs/design/layers.md#s3-cem-mlp, docs/design/energy-lens.md#s11-1-momentum)."""

    recursion_state: Literal["raw", "normalized"] = "raw"  # x^0 = h (the design's decision) or c (Algorithm 1)
    backprop_steps: int | None = None  # differentiate the last k of T steps; null: all T
    update: Literal["gd", "heavy_ball", "nesterov"] = (
        "gd"  # the optimizer the steps run (docs/design/energy-lens.md#s11-1-momentum)
    )
    momentum: float = 0.5  # mu in [0, 1); heavy_ball and nesterov only
    learnable_momentum: bool = False  # mu = sigmoid(momentum_logit), init logit(momentum)
    step_size: float = 1.0  # eta (docs/design/layers.md#s2-cem-attention)
    learnable_step_size: bool = False  # eta is a parameter, initialised at step_size
    checkpoint_steps: bool = False  # recompute each recursion step in backward (memory-lean, T >= 3)

    def validate_recursion(self, path: str) -> None:
        require(self.step_size > 0, f"{path}.step_size", f"must be > 0, got {self.step_size}.")
        require(
            self.backprop_steps is None or self.backprop_steps >= 1,
            f"{path}.backprop_steps",
            f"must be at least 1 (null: all steps), got {self.backprop_steps}.",
        )
        require(0.0 <= self.momentum < 1.0, f"{path}.momentum", f"must be in [0, 1), got {self.momentum}.")
        if self.learnable_momentum:
            require(
                self.update != "gd",
                f"{path}.learnable_momentum",
                "needs update: heavy_ball or nesterov (gd has no momentum to learn).",
            )
            require(
                self.momentum > 0.0,
                f"{path}.learnable_momentum",
                "needs momentum > 0: the parameter starts at logit(momentum), and logit(0) = -inf.",
            )

    def check_steps(self, steps: int, path: str) -> None:
        """Called by the model config with the component's recursion steps T."""
        require(
            self.backprop_steps is None or self.backprop_steps <= steps,
            f"{path}.backprop_steps",
            f"must be at most the recursion steps T = {steps} (1 under depth_mode: reuse), got {self.backprop_steps}.",
        )
        require(
            not (self.learnable_momentum and steps == 1),
            f"{path}.learnable_momentum",
            "has no effect at T = 1 (v^0 = 0 and u^0 = c, so mu never enters; 1 under depth_mode: reuse): "
            "the parameter would get no gradient. Use steps >= 2 or learnable_momentum: false.",
        )


class EnergyRecursion(nn.Module):
    supports_recursion = True
    impl = "fast"  # subclasses with a reference path set "reference" per instance

    def __init__(self, steps: int, options: RecursionOptions):
        super().__init__()
        self.steps = steps
        if options.learnable_step_size:
            self.step_size = nn.Parameter(torch.tensor(float(options.step_size)))
        else:
            self.step_size = float(options.step_size)
        self.checkpoint_steps = options.checkpoint_steps
        self.recursion_state = options.recursion_state
        self.backprop_steps = steps if options.backprop_steps is None else options.backprop_steps
        self.update = options.update
        self.learnable_momentum = options.learnable_momentum
        if (
            options.learnable_momentum
        ):  # one scalar per sublayer (docs/design/energy-lens.md#s11-1-momentum), not weight-decayed (not a matrix)
            mu = options.momentum
            self.momentum_logit = nn.Parameter(torch.tensor(math.log(mu / (1.0 - mu))))
        self.fixed_momentum = float(options.momentum)
        self.track_energy = False
        self.energy_trace: list[float] = []

    @property
    def frozen_steps(self) -> int:
        """T - k: the leading steps that carry no gradient."""
        return self.steps - self.backprop_steps

    @property
    def momentum_active(self) -> bool:
        """Whether the steps run the momentum loop: gd, T = 1 and a fixed mu = 0 are gd exactly."""
        return self.update != "gd" and self.steps > 1 and (self.learnable_momentum or self.fixed_momentum > 0)

    def momentum(self) -> torch.Tensor | float:
        """mu: sigmoid(momentum_logit) when learnable, else the fixed option."""
        return torch.sigmoid(self.momentum_logit) if self.learnable_momentum else self.fixed_momentum

    # -- the step protocol (module docstring) -------------------------------------------
    def step_context(self, c: torch.Tensor):
        raise NotImplementedError

    def direction(self, u: torch.Tensor, ctx) -> torch.Tensor:
        raise NotImplementedError

    def advance(self, x: torch.Tensor, u: torch.Tensor, ctx) -> torch.Tensor:
        """x + eta Delta(u): one gradient-descent step from x with query state u."""
        return x + self.direction(u, ctx)

    def step_energy(self, u: torch.Tensor, ctx) -> torch.Tensor:
        raise NotImplementedError

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def query_state(self, x: torch.Tensor, c: torch.Tensor, t: int) -> torch.Tensor:
        """u^t: the context c at t = 0 under both recursion states, RMSNorm(x^t) after.
        `impl: reference` writes u^0 = RMSNorm(x^0) literally under `raw` (x^0 = h: the
        value c, differentiated along its own path)."""
        if t == 0 and (self.impl != "reference" or self.recursion_state == "normalized"):
            return c
        return self.norm(x)

    def scaled_readout(self, readout: torch.Tensor) -> torch.Tensor:
        """eta * readout: folding the step size into the (small) read-out matrix saves a
        pass over the (B, J, D) update; a fixed eta = 1 is skipped entirely."""
        if isinstance(self.step_size, float) and self.step_size == 1.0:
            return readout
        return readout * self.step_size

    # -- incremental decoding (model/protocol.py IncrementalDecoding, JointStepDecoding) --
    def decode_context(self, c: torch.Tensor, past, position: int):
        """The step context of new tokens given the state of the earlier ones. Here: a
        position-wise sublayer (the MLPs: gamma = W c is per token), so `step_context`
        of the new tokens and no state; attention overrides it with its keys."""
        return self.step_context(c), None

    def decode(self, h: torch.Tensor, past, position: int):
        """The T steps of the new tokens: a token's recursion reads only its own state and
        the keys of the context up to it, which the state holds (docs/design/layers.md#s2-cem-attention). No energy trace."""
        tracking, self.track_energy = self.track_energy, False
        try:
            c = self.norm(h)
            ctx, state = self.decode_context(c, past, position)
            return self.descend(h, c, ctx), state
        finally:
            self.track_energy = tracking

    # -- the recursion ------------------------------------------------------------------
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        c = self.norm(h)
        return self.descend(h, c, self.step_context(c))

    def descend(self, h: torch.Tensor, c: torch.Tensor, ctx) -> torch.Tensor:
        """The sublayer output from h, its context c and the step context."""
        normalized = self.recursion_state == "normalized"
        x0 = c if normalized else h
        if self.momentum_active:
            x = self._descend_with_momentum(h, c, ctx, x0)
        else:
            x = self._descend_gd(h, c, ctx, x0)
        return h + (x - x0) if normalized else x

    def _descend_gd(self, h, c, ctx, x0):
        def step(x, t):
            return self.advance(x, self.query_state(x, c, t), ctx)

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
        return x

    def _descend_with_momentum(self, h, c, ctx, x0):
        """docs/design/energy-lens.md#s11-1-momentum; v = None stands for v^0 = 0 (the first step is a plain gd step)."""
        mu = self.momentum()
        nesterov = self.update == "nesterov"

        def plus_mu_times(base, v):
            """base + mu v in one pass over (B, J, D) (addcmul / add with alpha): a separate
            mu * v costs a pass forward and one backward per step, a measurable share of a
            T = 4 step on CPU (docs/lab-notes/from-code-comments.md)."""
            if isinstance(mu, torch.Tensor):
                return torch.addcmul(base, v, mu)
            return torch.add(base, v, alpha=mu)

        def lookahead(x, v):
            """y^t: Nesterov queries y = x + mu v, heavy ball y = x."""
            return plus_mu_times(x, v) if nesterov and v is not None else x

        def step(x, v, t):
            d = self.direction(self.query_state(lookahead(x, v), c, t), ctx)
            # v^1 = d in the state's precision: under autocast d is bf16, and v accumulates
            # (addcmul / add promote d to v's dtype)
            v = d.to(x.dtype) if v is None else plus_mu_times(d, v)
            return x + v, v

        x, v = x0, None
        frozen = self.frozen_steps if torch.is_grad_enabled() else 0
        if frozen:
            with torch.no_grad():  # x and v of the frozen steps are constants (no graph)
                for t in range(frozen):
                    if self.track_energy:
                        self._record(lookahead(x, v), c, h, t)
                    x, v = step(x, v, t)
                moved = x - x0
            x = x0 + moved  # a constant offset: gradients reach x^0 with Jacobian I
        checkpointed = self.checkpoint_steps and torch.is_grad_enabled()
        for t in range(frozen, self.steps):
            if self.track_energy:
                self._record(lookahead(x, v), c, h, t)
            if checkpointed:  # saves (x^t, v^t) and recomputes the step in backward
                x, v = checkpoint(step, x, v, t, use_reentrant=False)
            else:
                x, v = step(x, v, t)
        self._record(x, c, h, self.steps)  # the state reached
        return x

    def _record(self, state: torch.Tensor, c: torch.Tensor, h: torch.Tensor, t: int) -> None:
        if self.track_energy:
            self.record_energy(c if t == 0 else self.norm(state), h, t)

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

    def direction_flops(self, seq_len: int) -> float:
        """Forward FLOPs per token of one direction eta Delta(u) (with its query norm)."""
        raise NotImplementedError

    def flops_per_step(self, seq_len: int) -> float:
        """One step: the direction, plus the velocity update under momentum (mu v and
        mu v + d: 2 D; Nesterov's look-ahead x + mu v: one D more)."""
        if not self.momentum_active:
            return self.direction_flops(seq_len)
        d_model = self.norm.weight.numel()
        return self.direction_flops(seq_len) + (3 if self.update == "nesterov" else 2) * d_model

    def flops_per_token(self, seq_len: int) -> float:
        return self.flops_once(seq_len) + self.steps * self.flops_per_step(seq_len)

    def backward_flops_per_token(self, seq_len: int) -> float:
        """2x the forward FLOPs of what is differentiated: the frozen steps have no backward."""
        return 2.0 * (self.flops_once(seq_len) + self.backprop_steps * self.flops_per_step(seq_len))
