"""Resolved model sizes: the plain values every component is built from."""

from __future__ import annotations

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

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads
