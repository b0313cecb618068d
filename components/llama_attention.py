"""Llama multi-head attention sublayer with RoPE (docs/design/layers.md#s1-llama-baseline), HF-compatible names.

Maps the residual stream to the new residual stream: h + o_proj(attn(norm(h))).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from cem_ablate.config.dims import ModelDims
from cem_ablate.config.schema import require
from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.registry import register
from components.rope import RotaryEmbedding


class LlamaStepContext(NamedTuple):
    c: torch.Tensor  # (B, J, D) the normalized input: keys and values come from it
    cos: torch.Tensor  # RoPE tables of the sequence length
    sin: torch.Tensor


class LlamaDecodeContext(NamedTuple):
    """Incremental decoding: the rotated keys and the values of every token so far."""

    keys: torch.Tensor  # (B, K, P, d), RoPE applied at their positions
    values: torch.Tensor  # (B, K, P, d)
    cos: torch.Tensor  # RoPE tables of the new positions (J, d)
    sin: torch.Tensor


@dataclass(frozen=True)
class LlamaAttentionOptions:
    rope_theta: float = 10000.0  # RoPE's base frequency

    def validate(self, path: str) -> None:
        require(self.rope_theta > 0, f"{path}.rope_theta", f"must be > 0, got {self.rope_theta}.")

    def check_dims(self, dims: ModelDims, path: str) -> None:
        # RoPE rotates coordinate pairs: an odd head dimension has a coordinate with no partner.
        require(
            dims.head_dim % 2 == 0,
            f"{path.rpartition('.')[0] or path}.n_heads",
            f"attention llama (RoPE) needs an even head dimension; d_model={dims.d_model} / "
            f"n_heads={dims.n_heads} = {dims.head_dim}.",
        )


@register(
    "attention",
    "llama",
    options=LlamaAttentionOptions,
    description="Llama multi-head attention: W_Q, W_K, W_V, W_O, RoPE, causal SDPA.",
)
class LlamaAttention(nn.Module):
    supports_recursion = False

    def __init__(self, dims: ModelDims, options: LlamaAttentionOptions, steps: int = 1):
        super().__init__()
        d_model, std = dims.d_model, dims.init_std
        self.n_heads, self.head_dim = dims.n_heads, dims.head_dim
        self.norm = RMSNorm(d_model, dims.norm_eps)
        self.q_proj = linear(d_model, d_model, std)
        self.k_proj = linear(d_model, d_model, std)
        self.v_proj = linear(d_model, d_model, std)
        self.o_proj = linear(d_model, d_model, std)
        self.rope = RotaryEmbedding(self.head_dim, options.rope_theta)
        # SDPA's default 1/sqrt(d_head) under standard (None: the call is today's exactly);
        # under mup 1/tau = sqrt(d_head_base) / d_head (ModelDims.attention_temperature)
        self.scale = None if dims.parametrization == "standard" else 1.0 / dims.attention_temperature

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, j, _ = x.shape
        return x.view(b, j, self.n_heads, self.head_dim).transpose(1, 2)

    # -- the step protocol (docs/design/energy-lens.md#s11-3-energy-transformer-block: a parallel block drives one step at a shared c) --
    def step_context(self, c: torch.Tensor) -> LlamaStepContext:
        """The normalized input c and RoPE's tables. Keys and values are computed from c
        in `direction`, after the queries, as the sequential layer always did (so its
        gradients are bit-identical); Llama attention runs one step per block, so they
        are computed once either way."""
        cos, sin = self.rope(c.shape[1], c.dtype, c.device)
        return LlamaStepContext(c, cos, sin)

    def direction(self, u: torch.Tensor, ctx: LlamaStepContext | LlamaDecodeContext) -> torch.Tensor:
        """o_proj(attn(q(u), k(c), v(c))): the sublayer's increment at the normalized input u."""
        b, j, d = u.shape
        if isinstance(ctx, LlamaDecodeContext):
            return self._decode_direction(u, ctx)
        q = RotaryEmbedding.apply(self._heads(self.q_proj(u)), ctx.cos, ctx.sin)
        k = RotaryEmbedding.apply(self._heads(self.k_proj(ctx.c)), ctx.cos, ctx.sin)
        v = self._heads(self.v_proj(ctx.c))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return self.o_proj(o.transpose(1, 2).reshape(b, j, d))

    def parameter_classes(self) -> dict[str, str]:
        """muP (cem_ablate/model/parametrization.py): four D x D matrices, all hidden."""
        return {f"{name}.weight": "hidden" for name in ("q_proj", "k_proj", "v_proj", "o_proj")}

    # -- incremental decoding (model/protocol.py IncrementalDecoding): the K, V cache --
    def decode_context(self, c: torch.Tensor, past, position: int) -> tuple[LlamaDecodeContext, tuple]:
        """Keys (rotated at their positions) and values of the new tokens appended to
        `past` = (keys, values) of the earlier ones; the RoPE tables of the new positions
        are the rows of the full tables (the same float32 angles, so the same values)."""
        cos, sin = self.rope(position + c.shape[1], c.dtype, c.device)
        cos, sin = cos[position:], sin[position:]
        k = RotaryEmbedding.apply(self._heads(self.k_proj(c)), cos, sin)
        v = self._heads(self.v_proj(c))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        return LlamaDecodeContext(k, v, cos, sin), (k, v)

    def decode(self, h: torch.Tensor, past, position: int) -> tuple[torch.Tensor, tuple]:
        x = self.norm(h)
        ctx, state = self.decode_context(x, past, position)
        return h + self._decode_direction(x, ctx), state

    def _decode_direction(self, u: torch.Tensor, ctx: LlamaDecodeContext) -> torch.Tensor:
        """Queries of the new tokens against every cached key: new token i (position
        P - J + i) sees keys j <= P - J + i; one new token sees them all (no mask)."""
        b, j, d = u.shape
        total = ctx.keys.shape[2]
        q = RotaryEmbedding.apply(self._heads(self.q_proj(u)), ctx.cos, ctx.sin)
        mask = None
        if 1 < j < total:
            mask = (
                torch.arange(total, device=u.device)[None, :]
                <= torch.arange(total - j, total, device=u.device)[:, None]
            )
        o = F.scaled_dot_product_attention(
            q, ctx.keys, ctx.values, attn_mask=mask, is_causal=j == total > 1, scale=self.scale
        )
        return self.o_proj(o.transpose(1, 2).reshape(b, j, d))

    def step_energy(self, u: torch.Tensor, ctx) -> torch.Tensor:
        raise NotImplementedError(
            "Llama attention descends no energy (docs/design/layers.md#s1-llama-baseline): it has no energy trace."
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x = self.norm(h)
        return h + self.direction(x, self.step_context(x))

    def flops_per_token(self, seq_len: int) -> float:
        d = self.q_proj.in_features
        ctx = (seq_len + 1) / 2  # causal: token i attends to i keys on average
        return 2 * 4 * d * d + 2 * 2 * ctx * d
