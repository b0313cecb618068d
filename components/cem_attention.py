"""CEM attention: T gradient steps on the interaction energy (docs/design/layers.md#s2-cem-attention, paper §2.1-2.3).

    s_ijk = ((W_K^k c_j)·(W_Q^k x_i) + c_j·(delta_k ⊙ x_i)) / tau + b_ijk,   j <= i,  tau = sqrt(d)
    E(x_i | c_1..i) = -tau Σ_k log Σ_j exp(s_ijk)

Tied weights: key = value = W_K c, query W_Q u, read-out W_Q^T (two D x D matrices).
Keys/values and the context c = RMSNorm(h) are computed once per block; each step
re-normalizes the state, u = RMSNorm(x^t), and moves
    x^{t+1} = x^t + eta Σ_k P_k W_Q^kT o_k(u)      (= x - grad E at u when delta = 0).
With `diag_update: exact` the KQ-diagonal term of the gradient,
Σ_k P_k (delta_k ⊙ Σ_j p_ijk c_j), is added (Algorithm 1 leaves it out: `paper`).
`recursion_state` (x^0 = h or c), `backprop_steps` (truncated backpropagation) and
`update`/`momentum` (heavy-ball or Nesterov momentum over the steps, docs/design/energy-lens.md#s11-1-momentum) are
the shared recursion options of `components.energy_recursion`, which runs the steps
through this module's step protocol (`step_context`, `direction`, `advance`,
`step_energy`).

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

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import torch
from torch import nn

from cem_ablate.config.dims import ModelDims
from cem_ablate.config.schema import require
from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.registry import register
from components.alibi import ALiBi, alibi_rows
from components.cem_attention_kernels import causal_alibi, cem_attention_core, select_kernel
from components.energy_recursion import EnergyRecursion, RecursionOptions
from components.preconditioner import PreconditionerConfig, build_preconditioner

ATTENTION_PRECONDITIONER_RANK = 4  # paper, Appendix C.4


class AttentionStepContext(NamedTuple):
    """What every step reads, computed once per block from the context c (docs/design/layers.md#s2-cem-attention)."""

    c: torch.Tensor  # (B, J, D) context RMSNorm(h)
    keys: torch.Tensor  # (B, K, J, d) W_K c: keys = values (tied)
    values: torch.Tensor | None  # fast path, diag_update exact: keys ‖ c (Σ_j p_ijk c_j from the same call)
    readout: torch.Tensor  # (K·d, D) rows W_Q^k P_k; times eta on the fast path
    # reference: ALiBi + self bias; fast: causal ALiBi (the kernels add the self bias), None for flex
    bias: torch.Tensor | None
    kernel: str  # the attention kernel of the fast path ("reference" on the reference path)


class AttentionDecodeContext(NamedTuple):
    """Incremental decoding (model/protocol.py IncrementalDecoding): what the new tokens'
    steps read. The cache is one tensor per layer: the keys W_K c (= values) of every
    token so far, or, with a KQ diagonal (whose score c_j · (delta ⊙ u_i) needs c_j), the
    context c itself, from which scores and values go through W_K^k inside the step
    (`_decode_direction`): one D-wide tensor per token either way, where Llama keeps two."""

    memory: torch.Tensor  # (B, K, P, d) keys = values, or (B, P, D) the context c (with a KQ diagonal)
    readout: torch.Tensor  # (K·d, D) rows W_Q^k P_k, times eta
    bias: torch.Tensor  # (K, J, P) ALiBi + self bias of the new rows, -inf above the causal edge


@dataclass(frozen=True)
class CEMAttentionOptions(RecursionOptions):
    preconditioner: PreconditionerConfig = field(default_factory=PreconditionerConfig)
    kq_diag: Literal["none", "shared", "per_head"] = (
        "none"  # the KQ diagonal delta: none, one for all heads, one per head
    )
    diag_update: Literal["paper", "exact"] = (
        "paper"  # exact adds the diagonal's gradient term (Algorithm 1 leaves it out)
    )
    impl: Literal["fast", "reference"] = "fast"  # reference: explicit scores, for tests and debugging
    kernel: Literal["auto", "blocked", "sdpa", "flex"] = "auto"  # fast path only; auto: flex on CUDA, else blocked

    def validate(self, path: str) -> None:
        self.validate_recursion(path)
        require(
            self.kernel != "sdpa" or self.kq_diag == "none",
            f"{path}.kernel",
            "'sdpa' needs kq_diag: none (a learnable KQ diagonal would need a mask that requires "
            "grad, which SDPA does not take); use 'blocked' or 'auto'.",
        )

    def check_dims(self, dims: ModelDims, path: str) -> None:
        rank = self.preconditioner.rank
        if self.preconditioner.name == "diag_lowrank" and rank is not None:
            require(
                rank < dims.d_model,
                f"{path}.preconditioner.rank",
                f"rank {rank} must be smaller than d_model={dims.d_model}.",
            )


@register(
    "attention",
    "cem",
    options=CEMAttentionOptions,
    description="CEM attention: tied W_Q/W_K, ALiBi + self bias, KQ diagonal, T energy-descent steps.",
)
class CEMAttention(EnergyRecursion):
    def __init__(self, dims: ModelDims, options: CEMAttentionOptions, steps: int = 1):
        super().__init__(steps, options)
        self.impl, self.kernel = options.impl, options.kernel
        d_model, self.n_heads, self.head_dim = dims.d_model, dims.n_heads, dims.head_dim
        self.tau = (
            dims.attention_temperature
        )  # sqrt(d) (docs/design/layers.md#s2-cem-attention); d_head / sqrt(d_head_base) under mup
        self.diag_update = options.diag_update
        self.norm = RMSNorm(d_model, dims.norm_eps)
        self.w_q = linear(d_model, d_model, dims.init_std)
        self.w_k = linear(d_model, d_model, dims.init_std)
        # delta (docs/design/layers.md#s2-cem-attention): shape (D,) shared or (K, D) per head; absent for `none`.
        if options.kq_diag == "shared":
            self.kq_diag = nn.Parameter(torch.zeros(d_model))
        elif options.kq_diag == "per_head":
            self.kq_diag = nn.Parameter(torch.zeros(self.n_heads, d_model))
        self.self_bias = nn.Parameter(torch.zeros(self.n_heads))  # beta_k, init 0
        self.alibi = ALiBi(self.n_heads)
        self.precond = build_preconditioner(
            options.preconditioner, d_model, self.n_heads, ATTENTION_PRECONDITIONER_RANK
        )

    def parameter_classes(self) -> dict[str, str]:
        """muP classes (cem_ablate/model/parametrization.py). W_Q is used as W (queries) and as
        W^T (the read-out W_Q^T o), W_K as keys and, tied, as values: both are D x D, so fan-in
        and fan-out are D in every use and one class, hidden, fits both. The KQ diagonal and the
        self bias are vectors (lr unscaled): the KQ-diagonal score sums D coordinates, kept Θ(1)
        by the muP temperature tau ∝ d_head. The preconditioner declares its own."""
        classes = {"w_q.weight": "hidden", "w_k.weight": "hidden", "self_bias": "vector"}
        if self.delta is not None:
            classes["kq_diag"] = "vector"
        return classes

    @property
    def delta(self) -> torch.Tensor | None:
        return getattr(self, "kq_diag", None)

    # -- pieces shared by the update and the energy ---------------------------------
    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, j, _ = x.shape
        return x.view(b, j, self.n_heads, self.head_dim).transpose(1, 2)  # (B, K, J, d)

    def _scores(self, query_state, c, keys, bias):
        """s_ijk of docs/design/layers.md#s2-cem-attention for query state x (B, J, D): returns (B, K, J, J)."""
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

    # -- the step protocol (components.energy_recursion, docs/design/energy-lens.md#s11-energy-lens) -----------------
    def step_context(self, c: torch.Tensor) -> AttentionStepContext:
        """Keys/values W_K c, the read-out and the bias, once per block."""
        b, j, d_model = c.shape
        if self.impl == "reference":
            keys = self._split_heads(self.w_k(c))  # keys = values (tied)
            bias = self.alibi(j, self.self_bias, c.dtype, c.device)
            return AttentionStepContext(c, keys, None, self.readout(), bias, "reference")
        kv = self._split_heads(self.w_k(c)).contiguous()  # keys = values, once per block
        values = None  # = kv (tied)
        if self.delta is not None and self.diag_update == "exact":
            # one kernel call also returns Σ_j p_ijk c_j, in the value columns after d
            values = torch.cat([kv, c.unsqueeze(1).expand(b, self.n_heads, j, d_model)], dim=-1)
        readout = self.scaled_readout(self.readout())
        kernel = self.resolved_kernel(c.device)
        # flex adds ALiBi in its score_mod: the (K, J, J) bias would be built and never read
        # (134 MB per layer at 8 heads x 2048^2 in fp32)
        alibi = None if kernel == "flex" else causal_alibi(self.n_heads, j, c.dtype, c.device)
        return AttentionStepContext(c, kv, values, readout, alibi, kernel)

    def direction(self, u: torch.Tensor, ctx: AttentionStepContext | AttentionDecodeContext) -> torch.Tensor:
        """eta Σ_k P_k W_Q^kT o_k(u) (+ the exact KQ-diagonal term): shape (B, J, D)."""
        if isinstance(ctx, AttentionDecodeContext):
            return self._decode_direction(u, ctx)
        if self.impl == "reference":
            return self.step_size * self.descent_direction(u, ctx.c, ctx.keys, ctx.bias, ctx.readout)
        main, diagonal = self._fast_direction(u, ctx)
        return main if diagonal is None else main + diagonal

    def advance(self, x: torch.Tensor, u: torch.Tensor, ctx: AttentionStepContext) -> torch.Tensor:
        if self.impl == "reference" or isinstance(ctx, AttentionDecodeContext):
            return x + self.direction(u, ctx)
        main, diagonal = self._fast_direction(u, ctx)
        x = x + main
        return x if diagonal is None else x + diagonal  # term by term: gd's arithmetic order

    # -- incremental decoding (components.energy_recursion runs the steps) ---------------
    def decode_context(
        self, c: torch.Tensor, past: torch.Tensor | None, position: int
    ) -> tuple[AttentionDecodeContext, torch.Tensor]:
        """The new tokens' keys W_K c (or c, with a KQ diagonal) appended to `past`. A
        prompt (nothing cached yet) runs the training forward's own step context and
        kernels, which skip the causal half; later tokens read the cache."""
        if past is None and position == 0:
            ctx = self.step_context(c)
            return ctx, (c if self.delta is not None else ctx.keys)
        new = c if self.delta is not None else self._split_heads(self.w_k(c))
        memory = new if past is None else torch.cat([past, new], dim=-2)
        bias = alibi_rows(self.n_heads, self.self_bias, position, c.shape[1], c.dtype, c.device)
        return AttentionDecodeContext(memory, self.scaled_readout(self.readout()), bias), memory

    def _decode_direction(self, u: torch.Tensor, ctx: AttentionDecodeContext) -> torch.Tensor:
        """The direction of `descent_direction` with explicit scores of the new rows
        against the cache. With a KQ diagonal the cache is c, and W_K^k moves to the
        query side (s = (W_K^kT q_k + delta_k ⊙ u) · c_j / tau) and to the output
        (o_k = W_K^k Σ_j p_jk c_j), which also gives the exact diagonal term's Σ_j p_jk c_j."""
        b, j, _ = u.shape
        q = self._split_heads(self.w_q(u))  # (B, K, J, d)
        delta = self.delta
        if delta is None:
            p = torch.softmax(q @ ctx.memory.transpose(-1, -2) / self.tau + ctx.bias, dim=-1)
            o = p @ ctx.memory
        else:
            w_k = self.w_k.weight.view(self.n_heads, self.head_dim, -1)  # (K, d, D): W_K^k
            qc = torch.einsum("bkjd,kde->bkje", q, w_k)
            qc = qc + ((u * delta).unsqueeze(1) if delta.dim() == 1 else u.unsqueeze(1) * delta[None, :, None, :])
            c = ctx.memory.unsqueeze(1)  # (B, 1, P, D)
            p = torch.softmax(qc @ c.transpose(-1, -2) / self.tau + ctx.bias, dim=-1)
            pc = p @ c  # (B, K, J, D): Σ_j p_ijk c_j
            o = torch.einsum("bkje,kde->bkjd", pc, w_k)
        direction = o.transpose(1, 2).reshape(b, j, -1) @ ctx.readout
        if delta is not None and self.diag_update == "exact":
            scaled = delta if delta.dim() == 1 else delta[:, None, :]
            direction = direction + self.step_size * self.precond.apply((scaled * pc).transpose(1, 2)).sum(-2)
        return direction

    def step_energy(self, u: torch.Tensor, ctx: AttentionStepContext) -> torch.Tensor:
        bias = self.alibi(u.shape[1], self.self_bias, u.dtype, u.device)
        return self._energy(u, ctx.c, ctx.keys, bias)

    def descent_direction(self, u, c, keys, bias, readout):
        """Σ_k P_k W_Q^kT o_k(u) (+ the exact KQ-diagonal term) with explicit scores: (B, J, D)."""
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
        return select_kernel(
            device.type, wide_values=self.delta is not None and self.diag_update == "exact", head_dim=self.head_dim
        )

    def _fast_direction(self, u: torch.Tensor, ctx: AttentionStepContext):
        """The same direction through an exact attention kernel (module docstring), as
        (read-out term, exact KQ-diagonal term or None); eta is folded into the read-out."""
        b, j, d_model = u.shape
        d = self.head_dim
        delta = self.delta
        q = self._split_heads(self.w_q(u)).contiguous()
        qe = None
        if delta is not None:  # extra queries of the KQ-diagonal score, e = qe · c
            qe = (
                (u * (delta / self.tau)).unsqueeze(1)
                if delta.dim() == 1
                else u.unsqueeze(1) * (delta / self.tau)[None, :, None, :]
            )
        o = cem_attention_core(
            ctx.kernel,
            q,
            ctx.keys,
            ctx.values,
            self.self_bias,
            ctx.bias,
            1.0 / self.tau,
            qe,
            ctx.c if delta is not None else None,
        )
        main = o[..., :d].transpose(1, 2).reshape(b, j, d_model) @ ctx.readout
        if not (delta is not None and self.diag_update == "exact"):
            return main, None
        scaled = delta if delta.dim() == 1 else delta[:, None, :]
        return main, self.step_size * self.precond.apply((scaled * o[..., d:]).transpose(1, 2)).sum(-2)

    def _energy(self, x, c, keys, bias):
        return -self.tau * torch.logsumexp(self._scores(x, c, keys, bias), dim=-1).sum(dim=(1, 2))

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """E(x | norm(h)) summed over positions and heads: shape (B,)."""
        return self._energy(x, *self._context(h))

    def flops_once(self, seq_len: int) -> float:
        d = self.w_q.in_features
        return 2 * d * d  # W_K c once per block

    def direction_flops(self, seq_len: int) -> float:
        d = self.w_q.in_features
        ctx = (seq_len + 1) / 2  # causal average of keys per query
        per_step = 2 * d * d + 2 * ctx * d + 2 * ctx * d + 2 * d * d  # W_Q u, q·k, p·v, read-out
        if self.delta is not None:
            heads = 1 if self.delta.dim() == 1 else self.n_heads
            per_step += heads * (d + 2 * ctx * d)
            if self.diag_update == "exact":
                per_step += self.n_heads * (2 * ctx * d + d)
        return per_step
