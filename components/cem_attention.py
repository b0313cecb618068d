"""CEM attention: T gradient steps on the interaction energy (SPEC §2, paper §2.1-2.3).

    s_ijk = ((W_K^k c_j)·(W_Q^k x_i) + c_j·(delta_k ⊙ x_i)) / tau + b_ijk,   j <= i,  tau = sqrt(d)
    E(x_i | c_1..i) = -tau Σ_k log Σ_j exp(s_ijk)

Tied weights: key = value = W_K c, query W_Q u, read-out W_Q^T (two D x D matrices).
Keys/values and the context c = RMSNorm(h) are computed once per block; each step
re-normalizes the state, u = RMSNorm(x^t), and moves
    x^{t+1} = x^t + eta Σ_k P_k W_Q^kT o_k(u)      (= x - grad E at u when delta = 0).
With `diag_update: exact` the KQ-diagonal term of the gradient,
Σ_k P_k (delta_k ⊙ Σ_j p_ijk c_j), is added (Algorithm 1 leaves it out: `paper`).
`recursion_state` (x^0 = h or c) and `backprop_steps` (truncated backpropagation)
are the shared recursion options of `components.energy_recursion`.

Two code paths compute the same function (tests hold them to 1e-9 in float64):
`impl: reference` builds the (B, K, J, J) scores explicitly and lets autograd
differentiate them; `impl: fast` (default) runs an exact attention kernel from
`components.cem_attention_kernels` (causal block skipping on CPU, FlexAttention on
CUDA) in which the KQ diagonal is one extra score matrix per layer (shared) rather
than a wider head, the self bias and ALiBi are additive terms with exact gradients,
keys/values and the context are computed once per block, u = c at the first step
(x^0 = h), and eta P_k W_Q^kT is folded into one (D, D) read-out per forward.
`energy()` always uses the explicit scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from cem_ablate.config.dims import ModelDims
from cem_ablate.config.schema import require
from cem_ablate.registry import register
from components.alibi import ALiBi
from components.cem_attention_kernels import causal_alibi, cem_attention_core, select_kernel
from components.energy_recursion import EnergyRecursion, RecursionOptions
from cem_ablate.model.blocks import linear
from cem_ablate.model.blocks import RMSNorm
from components.preconditioner import PreconditionerConfig, build_preconditioner

ATTENTION_PRECONDITIONER_RANK = 4  # paper, Appendix C.4


@dataclass(frozen=True)
class CEMAttentionOptions(RecursionOptions):
    preconditioner: PreconditionerConfig = field(default_factory=PreconditionerConfig)
    kq_diag: Literal["none", "shared", "per_head"] = "none"
    diag_update: Literal["paper", "exact"] = "paper"
    step_size: float = 1.0
    learnable_step_size: bool = False
    impl: Literal["fast", "reference"] = "fast"  # reference: explicit scores, for tests and debugging
    kernel: Literal["auto", "blocked", "sdpa", "flex"] = "auto"  # fast path only; auto: flex on CUDA, else blocked
    checkpoint_steps: bool = False  # recompute each recursion step in backward (memory-lean, T >= 3)

    def validate(self, path: str) -> None:
        require(self.step_size > 0, f"{path}.step_size", f"must be > 0, got {self.step_size}.")
        self.validate_recursion(path)
        require(self.kernel != "sdpa" or self.kq_diag == "none", f"{path}.kernel",
                "'sdpa' needs kq_diag: none (a learnable KQ diagonal would need a mask that requires "
                "grad, which SDPA does not take); use 'blocked' or 'auto'.")

    def check_dims(self, dims: ModelDims, path: str) -> None:
        rank = self.preconditioner.rank
        if self.preconditioner.name == "diag_lowrank" and rank is not None:
            require(rank < dims.d_model, f"{path}.preconditioner.rank",
                    f"rank {rank} must be smaller than d_model={dims.d_model}.")


@register("attention", "cem", options=CEMAttentionOptions,
          description="CEM attention: tied W_Q/W_K, ALiBi + self bias, KQ diagonal, T energy-descent steps.")
class CEMAttention(EnergyRecursion):
    def __init__(self, dims: ModelDims, options: CEMAttentionOptions, steps: int = 1):
        super().__init__(steps, options.step_size, options.learnable_step_size, options.checkpoint_steps,
                         options.recursion_state, options.backprop_steps)
        self.impl, self.kernel = options.impl, options.kernel
        d_model, self.n_heads, self.head_dim = dims.d_model, dims.n_heads, dims.head_dim
        self.tau = math.sqrt(self.head_dim)
        self.diag_update = options.diag_update
        self.norm = RMSNorm(d_model, dims.norm_eps)
        self.w_q = linear(d_model, d_model, dims.init_std)
        self.w_k = linear(d_model, d_model, dims.init_std)
        # delta (SPEC §2): shape (D,) shared or (K, D) per head; absent for `none`.
        if options.kq_diag == "shared":
            self.kq_diag = nn.Parameter(torch.zeros(d_model))
        elif options.kq_diag == "per_head":
            self.kq_diag = nn.Parameter(torch.zeros(self.n_heads, d_model))
        self.self_bias = nn.Parameter(torch.zeros(self.n_heads))  # beta_k, init 0
        self.alibi = ALiBi(self.n_heads)
        self.precond = build_preconditioner(
            options.preconditioner, d_model, self.n_heads, ATTENTION_PRECONDITIONER_RANK
        )

    @property
    def delta(self) -> torch.Tensor | None:
        return getattr(self, "kq_diag", None)

    # -- pieces shared by the update and the energy ---------------------------------
    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, j, _ = x.shape
        return x.view(b, j, self.n_heads, self.head_dim).transpose(1, 2)  # (B, K, J, d)

    def _scores(self, query_state, c, keys, bias):
        """s_ijk of SPEC §2 for query state x (B, J, D): returns (B, K, J, J)."""
        q = self._split_heads(self.w_q(query_state))
        s = q @ keys.transpose(-1, -2)
        delta = self.delta
        if delta is not None:
            if delta.dim() == 1:  # shared: one extra score matrix for all heads
                s = s + ((query_state * delta) @ c.transpose(-1, -2)).unsqueeze(1)
            else:
                s = s + torch.einsum("bid,kd,bjd->bkij", query_state, delta, c)
        return s / self.tau + bias

    def _context(self, h):
        c = self.norm(h)
        keys = self._split_heads(self.w_k(c))  # keys = values (tied)
        bias = self.alibi(h.shape[1], self.self_bias, h.dtype, h.device)
        return c, keys, bias

    def readout(self) -> torch.Tensor:
        """(K·d, D) matrix whose head-k rows are W_Q^k P_k: folds P_k W_Q^kT (exact, P symmetric)."""
        w = self.w_q.weight.view(self.n_heads, self.head_dim, -1)
        return self.precond.fold(w).reshape(self.n_heads * self.head_dim, -1)

    # -- the layer ------------------------------------------------------------------
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.impl == "reference":
            return self.forward_reference(h)
        return self.forward_fast(h)

    def forward_reference(self, h: torch.Tensor) -> torch.Tensor:
        """SPEC §2 with explicit (B, K, J, J) scores, differentiated by autograd."""
        c, keys, bias = self._context(h)
        readout = self.readout()

        def step(x, t):
            u = c if t == 0 and self.recursion_state == "normalized" else self.norm(x)  # u^0 = c
            return x + self.step_size * self.descent_direction(u, c, keys, bias, readout)

        return self.descend(h, c, step)

    def descent_direction(self, u, c, keys, bias, readout):
        """Σ_k P_k W_Q^kT o_k(u) (+ the exact KQ-diagonal term): shape (B, J, D)."""
        b, j, _ = u.shape
        p = torch.softmax(self._scores(u, c, keys, bias), dim=-1)
        o = (p @ keys).transpose(1, 2).reshape(b, j, -1)
        direction = o @ readout
        delta = self.delta
        if delta is not None and self.diag_update == "exact":
            ctx = p @ c.unsqueeze(1)  # (B, K, J, D): Σ_j p_ijk c_j
            delta = delta if delta.dim() == 1 else delta[:, None, :]
            direction = direction + self.precond.apply((delta * ctx).transpose(1, 2)).sum(-2)
        return direction

    def resolved_kernel(self, device: torch.device) -> str:
        if self.kernel != "auto":
            return self.kernel
        return select_kernel(device.type, wide_values=self.delta is not None and self.diag_update == "exact",
                             head_dim=self.head_dim)

    def forward_fast(self, h: torch.Tensor) -> torch.Tensor:
        """The same function through an exact attention kernel (module docstring)."""
        b, j, d_model = h.shape
        k_heads, d = self.n_heads, self.head_dim
        delta = self.delta
        exact = delta is not None and self.diag_update == "exact"
        c = self.norm(h)
        kv = self._split_heads(self.w_k(c)).contiguous()  # keys = values, once per block
        values = None  # = kv (tied)
        if exact:  # one kernel call also returns Σ_j p_ijk c_j, in the value columns after d
            values = torch.cat([kv, c.unsqueeze(1).expand(b, k_heads, j, d_model)], dim=-1)
        readout = self.scaled_readout(self.readout())
        alibi = causal_alibi(k_heads, j, h.dtype, h.device)
        kernel = self.resolved_kernel(h.device)

        def step(x, t):
            u = c if t == 0 else self.norm(x)  # u^0 = c under both recursion states
            q = self._split_heads(self.w_q(u)).contiguous()
            qe = None
            if delta is not None:  # extra queries of the KQ-diagonal score, e = qe · c
                qe = (u * (delta / self.tau)).unsqueeze(1) if delta.dim() == 1 \
                    else u.unsqueeze(1) * (delta / self.tau)[None, :, None, :]
            o = cem_attention_core(kernel, q, kv, values, self.self_bias, alibi, 1.0 / self.tau,
                                   qe, c if delta is not None else None)
            x = x + o[..., :d].transpose(1, 2).reshape(b, j, d_model) @ readout
            if exact:
                ctx = o[..., d:]  # (B, K, J, D)
                scaled = delta if delta.dim() == 1 else delta[:, None, :]
                x = x + self.step_size * self.precond.apply((scaled * ctx).transpose(1, 2)).sum(-2)
            return x

        return self.descend(h, c, step)

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """E(x | norm(h)) summed over positions and heads: shape (B,)."""
        c, keys, bias = self._context(h)
        return -self.tau * torch.logsumexp(self._scores(x, c, keys, bias), dim=-1).sum(dim=(1, 2))

    def flops_once(self, seq_len: int) -> float:
        d = self.w_q.in_features
        return 2 * d * d  # W_K c once per block

    def flops_per_step(self, seq_len: int) -> float:
        d = self.w_q.in_features
        ctx = (seq_len + 1) / 2  # causal average of keys per query
        per_step = 2 * d * d + 2 * ctx * d + 2 * ctx * d + 2 * d * d  # W_Q u, q·k, p·v, read-out
        if self.delta is not None:
            heads = 1 if self.delta.dim() == 1 else self.n_heads
            per_step += heads * (d + 2 * ctx * d)
            if self.diag_update == "exact":
                per_step += self.n_heads * (2 * ctx * d + d)
        return per_step
