"""The platform's own log-likelihood of strings, the quantities lm-evaluation-harness
asks a model for (its `loglikelihood` and `loglikelihood_rolling` requests), computed
on the platform model and tokenizer without transformers or lm_eval.

    continuation_loglik(model, tok, context, continuation) = sum_i log p(c_i | context, c_<i)
    rolling_loglik(model, tok, text, prefix_id)              = sum_i log p(t_i | prefix, t_<i)

Tokens are the tokenizer's encoding of context + continuation, split where the
context's own encoding ends (as the harness does); the text must fit the model's
context (no windows here).
"""

from __future__ import annotations

import numpy as np
import torch


def _encode(tokenizer, text: str) -> list[int]:
    return [int(i) for i in np.asarray(tokenizer.encode_batch([text])[0])]


@torch.no_grad()
def _sum_logprob(model, ids: list[int], first_target: int) -> float:
    """sum over j >= first_target of log p(ids[j] | ids[:j])."""
    inputs = torch.tensor([ids[:-1]], dtype=torch.long)
    # In the model's dtype (float32 for an export), as the harness computes it: a float64
    # sum differs from a float32 one by ~1e-7 relative, ~1e-5 on a 100-nat text.
    logprobs = torch.log_softmax(model(inputs), dim=-1)[0]
    targets = torch.tensor(ids[1:])
    picked = logprobs[torch.arange(len(targets)), targets]
    return float(picked[first_target - 1 :].sum())


def continuation_loglik(model, tokenizer, context: str, continuation: str) -> float:
    whole = _encode(tokenizer, context + continuation)
    n_context = len(_encode(tokenizer, context))
    if n_context == 0:
        raise ValueError("an empty context has no first token to condition on")
    return _sum_logprob(model, whole, n_context)


def rolling_loglik(model, tokenizer, text: str, prefix_id: int) -> float:
    return _sum_logprob(model, [prefix_id, *_encode(tokenizer, text)], 1)
