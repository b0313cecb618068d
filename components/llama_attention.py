"""Llama multi-head attention sublayer with RoPE (SPEC §1), HF-compatible names.

Maps the residual stream to the new residual stream: h + o_proj(attn(norm(h))).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cem_ablate.config.schema import require
from cem_ablate.config.dims import ModelDims
from cem_ablate.model.blocks import linear
from cem_ablate.model.blocks import RMSNorm
from components.rope import RotaryEmbedding
from cem_ablate.registry import register


@dataclass(frozen=True)
class LlamaAttentionOptions:
    rope_theta: float = 10000.0

    def validate(self, path: str) -> None:
        require(self.rope_theta > 0, f"{path}.rope_theta", f"must be > 0, got {self.rope_theta}.")



@register("attention", "llama", options=LlamaAttentionOptions,
          description="Llama multi-head attention: W_Q, W_K, W_V, W_O, RoPE, causal SDPA.")
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

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, j, _ = x.shape
        return x.view(b, j, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, j, d = h.shape
        x = self.norm(h)
        cos, sin = self.rope(j, x.dtype, x.device)
        q = RotaryEmbedding.apply(self._heads(self.q_proj(x)), cos, sin)
        k = RotaryEmbedding.apply(self._heads(self.k_proj(x)), cos, sin)
        v = self._heads(self.v_proj(x))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return h + self.o_proj(o.transpose(1, 2).reshape(b, j, d))

    def flops_per_token(self, seq_len: int) -> float:
        d = self.q_proj.in_features
        ctx = (seq_len + 1) / 2  # causal: token i attends to i keys on average
        return 2 * 4 * d * d + 2 * 2 * ctx * d
