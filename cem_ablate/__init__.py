"""cem-ablate: ablation studies of Transformer layer parameterizations (CEM paper)."""

from __future__ import annotations

__version__ = "0.1.0"


def build_model(cfg):
    """Build a model from a `model:` mapping (docs/design/contract.md#s10-public-contract), validated here (a ConfigError
    names the bad key); `cem_ablate.model.build_model` takes the parsed `ModelConfig`."""
    from cem_ablate.model.assembly import build_model as _build
    from cem_ablate.model.config import parse_model_config

    return _build(parse_model_config(cfg))


__all__ = ["build_model", "__version__"]
