"""Incremental decoding with a cache: the logits of new tokens given the earlier ones.

    cache = new_cache(model)                     # empty; one per batch of sequences
    logits = decode(model, prompt_ids, cache)    # prefill: (B, J, vocab), the cache holds J tokens
    logits = decode(model, next_ids, cache)      # (B, 1, vocab) for the next token, and so on

`decode` gives the logits `model(ids)` gives those positions of the whole sequence
(float64: to 1e-10, tests/model/test_decoding.py), at the cost of the new tokens only.
Every sublayer application keeps its own state in the cache through its decoding hook
(model/protocol.py `IncrementalDecoding.decode`; `JointStepDecoding.decode_context` in a
`block: parallel` block): Llama attention its rotated keys and its values, CEM attention
one tensor (keys = values, W_K c, reused by all T steps; with a KQ diagonal the context c
itself, from which keys and values are W_K c), MLPs nothing. Under `depth_mode: reuse`
each application of a sublayer is its own entry. A model with a sublayer that has no
hook still decodes, by recomputing the whole prefix for every call (`missing_hooks`
says which; the CLI warns once).

`DecodingCache` is the one cache type: `position` (tokens held), `blocks` (per block,
{'attention.r' | 'mlp.r' | 'attention' | 'mlp': state}), `nbytes()`, and `select(index)`
to keep or reorder batch rows (beam search). A Hugging Face `Cache` can wrap it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from cem_ablate.model.protocol import decodes
from cem_ablate.model.transformer import CEMTransformer, ParallelBlock


@dataclass
class DecodingCache:
    """What `decode` keeps between calls (module docstring)."""

    position: int = 0  # tokens decoded so far (the next token's position)
    blocks: list[dict[str, Any]] = field(default_factory=list)  # per block: application -> state
    recompute: bool = False  # no hooks: keep the token ids and run the whole prefix
    token_ids: Tensor | None = None  # recompute only

    def tensors(self) -> list[Tensor]:
        out = [] if self.token_ids is None else [self.token_ids]
        for states in self.blocks:
            for state in states.values():
                out.extend(_tensors(state))
        return out

    def nbytes(self) -> int:
        """Bytes held by the cached states (the token ids when recomputing)."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def bytes_per_token(self) -> float:
        """nbytes per cached token per sequence (0 before the first token)."""
        batch = self.batch_size()
        return self.nbytes() / (self.position * batch) if self.position and batch else 0.0

    def batch_size(self) -> int:
        tensors = self.tensors()
        return tensors[0].shape[0] if tensors else 0

    def select(self, index: Tensor) -> None:
        """Keep the batch rows `index` (in that order) of every state."""
        if self.token_ids is not None:
            self.token_ids = self.token_ids.index_select(0, index)
        self.blocks = [
            {name: _map(state, lambda t: t.index_select(0, index.to(t.device))) for name, state in states.items()}
            for states in self.blocks
        ]


def _tensors(state: Any) -> list[Tensor]:
    if state is None:
        return []
    if isinstance(state, Tensor):
        return [state]
    return list(state.values() if isinstance(state, dict) else state)


def _map(state: Any, fn):
    if state is None:
        return None
    if isinstance(state, Tensor):
        return fn(state)
    if isinstance(state, dict):
        return {k: fn(t) for k, t in state.items()}
    return type(state)(fn(t) for t in state)


def missing_hooks(model: CEMTransformer) -> list[str]:
    """The sublayers without the decoding hook their block needs, as
    "attention 'name' (source) has no decode": empty when the model decodes with a cache."""
    config = model.config
    block = model.blocks[0]  # every block is built from the same config
    joint = isinstance(block, ParallelBlock)
    hook = "decode_context" if joint else "decode"
    out = []
    for kind, module in (("attention", block.attention), ("mlp", block.mlp)):
        if not decodes(module, joint):
            sub = getattr(config, kind, None)
            name = f"{kind} {sub.name!r} ({sub.spec.source})" if sub is not None else f"{kind} {type(module).__name__}"
            out.append(f"{name} has no {hook}")
    return out


def new_cache(model: CEMTransformer) -> DecodingCache:
    """An empty cache: states per block, or the token ids when a hook is missing."""
    if missing_hooks(model):
        return DecodingCache(recompute=True)
    return DecodingCache(blocks=[{} for _ in model.blocks])


@torch.no_grad()
def decode(model: CEMTransformer, input_ids: Tensor, cache: DecodingCache) -> Tensor:
    """Logits (B, J, vocab) of the J new tokens `input_ids` (B, J) following the
    `cache.position` tokens in `cache`; the cache then holds them too."""
    j = input_ids.shape[1]
    if cache.recompute:
        ids = input_ids if cache.token_ids is None else torch.cat([cache.token_ids, input_ids], dim=1)
        cache.token_ids = ids
        cache.position += j
        return model(ids)[:, -j:]
    h = model.embed_tokens(input_ids)
    v = None
    residual = model.blocks[0].stream == "residual"
    for block, states in zip(model.blocks, cache.blocks):
        if residual:
            h = block.decode(h, None, states, cache.position)
        else:
            h, v = block.decode(h, v, states, cache.position)
    cache.position += j
    return model.lm_head(model.norm(h))
