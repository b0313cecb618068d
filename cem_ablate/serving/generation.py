"""Sampling tokens from a model with the decoding cache (model/decoding.py).

Greedy (temperature 0) takes the argmax; otherwise logits / temperature, then top-k
(the k largest), then top-p (the smallest set of largest probabilities whose sum
reaches p), sampled with a seeded generator: the same seed gives the same tokens.
`generate` yields one token per sequence at a time, so the caller can stream them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from cem_ablate.config.schema import require
from cem_ablate.model.decoding import DecodingCache, decode, new_cache
from cem_ablate.model.transformer import CEMTransformer


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0: greedy
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def validate(self) -> None:
        """Checked once, naming the command-line flag."""
        require(self.max_new_tokens >= 1, "--max-new-tokens", f"must be >= 1, got {self.max_new_tokens}.")
        require(self.temperature >= 0, "--temperature", f"must be >= 0 (0: greedy), got {self.temperature}.")
        require(self.top_k is None or self.top_k >= 1, "--top-k", f"must be >= 1, got {self.top_k}.")
        require(self.top_p is None or 0 < self.top_p <= 1, "--top-p", f"must be in (0, 1], got {self.top_p}.")


def next_token(logits: Tensor, sampling: Sampling, generator: torch.Generator | None = None) -> Tensor:
    """(B,) token ids from the last position's logits (B, vocab)."""
    if sampling.temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p is not None and sampling.top_p < 1:
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = ordered.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the tokens ranked above each
        ordered = ordered.masked_fill(before >= sampling.top_p, float("-inf"))  # the first always stays
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, ordered)
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: CEMTransformer,
    prompt: Tensor,
    sampling: Sampling,
    eos_id: int | None = None,
    cache: DecodingCache | None = None,
) -> Iterator[Tensor]:
    """Yield (B,) new token ids one step at a time after `prompt` (B, J): the prompt is
    prefilled in one call, each token then costs one cached decoding step. Stops after
    `max_new_tokens`, or when every sequence has produced `eos_id`."""
    cache = new_cache(model) if cache is None else cache
    generator = torch.Generator(device=prompt.device).manual_seed(sampling.seed)
    logits = decode(model, prompt, cache)[:, -1]
    done = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    for i in range(sampling.max_new_tokens):
        token = next_token(logits, sampling, generator)
        yield token
        if eos_id is not None:
            done |= token == eos_id
            if bool(done.all()):
                return
        if i + 1 < sampling.max_new_tokens:
            logits = decode(model, token[:, None], cache)[:, -1]
