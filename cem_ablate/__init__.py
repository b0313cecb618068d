"""cem-ablate: ablation studies of Transformer layer parameterizations (CEM paper)."""

from __future__ import annotations

__version__ = "0.1.0"


def build_model(cfg):
    """Build a model from a `model:` mapping (SPEC §10). See cem_ablate.model."""
    from cem_ablate.model.assembly import build_model as _build

    return _build(cfg)


__all__ = ["build_model", "__version__"]
