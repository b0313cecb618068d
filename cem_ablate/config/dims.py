"""Resolved model sizes: the plain values every component is built from."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelDims:
    d_model: int
    n_layers: int
    n_heads: int
    d_mlp: int
    vocab_size: int
    max_seq_len: int
    norm_eps: float = 1e-5
    init_std: float = 0.02
    # `model.parametrization` (docs/design/parametrization.md#s12-parametrization; decisions in cem_ablate/model/parametrization.py):
    # "standard" is the paper's model; under "mup" width is measured against base_d_model.
    parametrization: str = "standard"
    base_d_model: int = 256
    mup_readout: str = "scaled"  # "scaled" | "zero": the LM head's init under mup
    readout_init_scale: float = 1.0  # the LM head's init std is init_std x this (model.readout_init_scale)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def width_multiplier(self) -> float:
        """m = d_model / base_d_model under mup (the factor every muP rule is a power of); 1 under standard."""
        return self.d_model / self.base_d_model if self.parametrization == "mup" else 1.0

    @property
    def attention_temperature(self) -> float:
        """tau, the divisor of every attention logit (docs/design/layers.md#s2-cem-attention's tau = sqrt(d)).

        Under mup the logits are divided by d_head, not sqrt(d_head) (muP: after training q and k
        are correlated, so q.k grows like d_head), with the constant chosen so that tau equals the
        standard sqrt(d_head) at the base width: tau = d_head / sqrt(d_head_base), d_head_base =
        base_d_model / n_heads (width is scaled at a fixed head count, as in studies/width.yaml).
        The same tau divides CEM attention's KQ-diagonal score c.(delta*x), a sum over all D
        coordinates: with heads fixed, d_head grows like D, so that term stays Theta(1) too.
        """
        if self.parametrization != "mup":
            return math.sqrt(self.head_dim)
        return self.head_dim / math.sqrt(self.base_d_model / self.n_heads)
