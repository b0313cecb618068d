"""The public building blocks of an attention component, at one stable import path.

    from components.attention_blocks import (LlamaAttention, RotaryEmbedding, causal_mask,
                                             extend_kv_cache)

A plugin may import these (and `cem_ablate.model.blocks`: `RMSNorm`, `linear`); `cem-ablate
export` copies them into the exported folder with the plugin, so the folder needs neither
cem-ablate nor the plugin installed. The contract they serve is docs/reference/components.md,
"The contract: attention": the model has no positional embedding and passes no mask, so an
attention supplies its positions (RoPE here) and applies its own causal mask; `decode`
keeps what later tokens read (here: the rotated keys and the values).

Everything else in `components` is the built-in zoo: importable, but not promised stable.
"""

from __future__ import annotations

import torch
from torch import Tensor

from components.llama_attention import LlamaAttention
from components.rope import RotaryEmbedding, rotate_half

__all__ = ["LlamaAttention", "RotaryEmbedding", "causal_mask", "extend_kv_cache", "rotate_half"]


def causal_mask(queries: int, keys: int, device: torch.device | str | None = None) -> Tensor:
    """(queries, keys) bool, True where a query may read a key: the queries are the last
    `queries` of `keys` positions, and query i reads keys 0 .. keys - queries + i.

    `causal_mask(J, J)` is the lower triangle of a whole sequence's forward; in `decode`,
    J new tokens after P cached ones read `causal_mask(J, P + J)`. Use it with
    `scores.masked_fill(~mask, float("-inf"))` before a softmax, or multiply weights by it."""
    if not 0 <= queries <= keys:
        raise ValueError(f"causal_mask needs 0 <= queries <= keys, got queries={queries}, keys={keys}")
    first = keys - queries
    return torch.arange(keys, device=device)[None, :] <= torch.arange(first, keys, device=device)[:, None]


def extend_kv_cache(past: tuple[Tensor, Tensor] | None, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """The key/value cache after new tokens: `past` (None before the first call) with
    `keys` and `values` (B, heads, J, d) appended along the sequence (dim 2).

    The result is a plain tuple of tensors with the batch in dim 0: what `decode` returns
    as its state (the model's cache counts its bytes and selects its batch rows)."""
    if past is None:
        return keys, values
    return torch.cat([past[0], keys], dim=2), torch.cat([past[1], values], dim=2)
