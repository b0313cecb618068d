"""Bias-free linear maps with the SPEC §1 initialization, shared by every family."""

from __future__ import annotations

from torch import nn


def linear(in_features: int, out_features: int, std: float) -> nn.Linear:
    """nn.Linear without bias, weights ~ N(0, std^2) (SPEC §1 init decision: std 0.02)."""
    layer = nn.Linear(in_features, out_features, bias=False)
    nn.init.normal_(layer.weight, mean=0.0, std=std)
    return layer
