"""build_model(cfg): the one way a model is made from a `model:` config (SPEC §10)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cem_ablate.model import protocol
from cem_ablate.model.config import ModelConfig, SublayerConfig, parse_model_config
from cem_ablate.model.transformer import Block, CEMTransformer


def _build_sublayer(sub: SublayerConfig, dims) -> protocol.Sublayer:
    """`factory(dims, options, steps)`, checked against the component protocol."""
    spec = sub.spec
    return protocol.check_built(spec.factory(dims, sub.options, sub.recursion_steps), spec,
                                f"model.{sub.kind}.name")


def build_model(cfg: ModelConfig | Mapping[str, Any]) -> CEMTransformer:
    """Validate `cfg` (raising ConfigError naming the key) and build the model."""
    config = parse_model_config(cfg)
    dims = config.dims
    blocks = [
        Block(
            _build_sublayer(config.attention, dims),
            _build_sublayer(config.mlp, dims),
            attention_repeats=config.attention.repeats,
            mlp_repeats=config.mlp.repeats,
        )
        for _ in range(dims.n_layers)
    ]
    return CEMTransformer(dims, blocks, config)
