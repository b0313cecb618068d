"""How long a run trains: token budget, optimizer steps, gradient accumulation (docs/design/experiments.md#s7-training-recipe).

- The effective batch (sequences per optimizer step) is fixed by the config; the
  accumulation that reaches it follows from the devices present:
  accumulation = effective_batch / (batch_size x devices x num_nodes).
- The budget is `max_steps` steps, or a token budget (`chinchilla` = 20 tokens per
  parameter of the matching Llama baseline) rounded up to whole optimizer steps. The
  baseline has the vocabulary the run's model is built with (`RunConfig.training_model`):
  a byte-tokenizer model trains on 20 x its own byte-vocabulary baseline.
- Warmup is `warmup_frac` of the steps, at least one when the fraction is non-zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cem_ablate.model.config import ModelConfig, llama_baseline_params
from cem_ablate.training.config import DEFAULT_MAX_STEPS, RunConfig, TrainConfig

CHINCHILLA_TOKENS_PER_PARAM = 20


@dataclass(frozen=True)
class Budget:
    steps: int  # optimizer steps
    accumulation: int  # micro-batches per optimizer step and device
    effective_batch: int  # sequences per optimizer step (all devices)
    tokens_per_sequence: int  # block size; 1 for GP regression, where an example counts as one token
    tokens_per_step: int
    warmup_steps: int
    requested_tokens: int | None  # the token budget asked for (None when steps were given)
    rule: str  # "max_steps" | "tokens" | "chinchilla" | "default"

    @property
    def tokens(self) -> int:
        """Tokens actually trained on: whole steps, so >= the requested budget."""
        return self.steps * self.tokens_per_step

    @property
    def micro_batches(self) -> int:
        """Micro-batches per device over the whole run."""
        return self.steps * self.accumulation

    def describe(self) -> str:
        seq = self.tokens_per_sequence
        if self.requested_tokens is None:
            head = f"{self.tokens:,} tokens ({self.rule})"
        else:
            rule = " (chinchilla: 20 x Llama-baseline parameters)" if self.rule == "chinchilla" else ""
            head = f"{self.requested_tokens:,} tokens{rule}; trains {self.tokens:,}"
        return (
            f"{head} = {self.steps:,} steps x {self.effective_batch} sequences x {seq} tokens, "
            f"accumulation {self.accumulation}, warmup {self.warmup_steps} steps"
        )


def chinchilla_tokens(model: ModelConfig) -> int:
    """20 x the parameters of the Llama baseline of the same size and vocabulary (docs/design/experiments.md#s7-training-recipe)."""
    return CHINCHILLA_TOKENS_PER_PARAM * llama_baseline_params(model)


def accumulation_steps(train: TrainConfig) -> int:
    per_step = train.batch_size * train.world_size
    effective = train.effective_batch or per_step
    return effective // per_step  # divisibility is checked by parse_run_config


def resolve_budget(cfg: RunConfig, tokenizer_vocab_size: int | None = None) -> Budget:
    """`tokenizer_vocab_size`: the loaded tokenizer's size, as the model is built with
    (the engine passes it; dry runs use what the config knows statically)."""
    train = cfg.train
    accumulation = accumulation_steps(train)
    effective = accumulation * train.batch_size * train.world_size
    tokens_per_sequence = 1 if cfg.data.task == "gp" else cfg.data.block_size  # a GP example is one input
    tokens_per_step = effective * tokens_per_sequence
    requested: int | None = None
    if train.max_steps is not None:
        steps, rule = train.max_steps, "max_steps"
    elif train.token_budget is None:
        steps, rule = DEFAULT_MAX_STEPS, "default"
    else:
        if train.token_budget == "chinchilla":
            requested, rule = chinchilla_tokens(cfg.training_model(tokenizer_vocab_size)), "chinchilla"
        else:
            requested, rule = int(float(train.token_budget)), "tokens"
        steps = max(1, math.ceil(requested / tokens_per_step))
    warmup = math.ceil(train.warmup_frac * steps) if train.warmup_frac > 0 else 0
    return Budget(steps, accumulation, effective, tokens_per_sequence, tokens_per_step, warmup, requested, rule)
