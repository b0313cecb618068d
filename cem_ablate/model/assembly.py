"""build_model(cfg): the one way a model is made from a `model:` config (docs/design/contract.md#s10-public-contract)."""

from __future__ import annotations

import dataclasses

from torch import nn

from cem_ablate.config.errors import ConfigError
from cem_ablate.model import protocol
from cem_ablate.model.config import ModelConfig, SublayerConfig
from cem_ablate.model.parametrization import apply_mup_init
from cem_ablate.model.transformer import Block, CEMTransformer, ParallelBlock


def _build_sublayer(sub: SublayerConfig, dims, step_scaling: str = "none") -> protocol.Sublayer:
    """`factory(dims, options, steps)`, checked against the component protocol."""
    spec = sub.spec
    options = sub.options
    if step_scaling == "inverse_steps" and sub.recursion_steps > 1 and hasattr(options, "step_size"):
        # eta / T (model.step_scaling): the T steps of a weight-tied loop move the state as far
        # in total as one step did, the 1/N residual scale of looped transformers
        options = dataclasses.replace(options, step_size=options.step_size / sub.recursion_steps)
    return protocol.check_built(spec.factory(dims, options, sub.recursion_steps), spec, f"model.{sub.kind}.name")


def build_model(config: ModelConfig) -> CEMTransformer:
    """Build the model of a validated `config` (a mapping is parsed by `cem_ablate.build_model`)."""
    dims = config.dims
    blocks = [_build_block(config, dims) for _ in range(dims.n_layers)]
    model = CEMTransformer(dims, blocks, config)
    if dims.parametrization == "mup":
        apply_mup_init(model, dims)
    return model


def _build_block(config: ModelConfig, dims) -> Block:
    """One block of `config` (docs/design/energy-lens.md#s11-2-velocity-stream stream options, docs/design/energy-lens.md#s11-3-energy-transformer-block block layout)."""
    stream = {
        "stream": config.stream,
        "stream_momentum": config.stream_momentum,
        "velocity_norm": config.velocity_norm,
        "dims": dims,
    }
    attention = _build_sublayer(config.attention, dims, config.step_scaling)
    mlp = _build_sublayer(config.mlp, dims, config.step_scaling)
    if config.block == "parallel":
        # The joint step runs the sublayers' steps itself (T = attention steps, docs/design/energy-lens.md#s11-3-energy-transformer-block).
        # The methods were checked on the class at parse; the block normalizes with the
        # attention's `norm`, an attribute of the built module.
        if not isinstance(getattr(attention, "norm", None), nn.Module):
            raise ConfigError(
                "model.attention.name",
                f"attention {config.attention.name!r} ({config.attention.spec.source}) has no "
                "`norm` module, which block: parallel normalizes with (docs/design/energy-lens.md#s11-3-energy-transformer-block).",
            )
        return ParallelBlock(attention, mlp, steps=config.attention.steps, **stream)
    return Block(attention, mlp, attention_repeats=config.attention.repeats, mlp_repeats=config.mlp.repeats, **stream)
