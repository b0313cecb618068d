"""The network a run trains, and its parameter/FLOP report, without Lightning.

Kept free of Lightning imports (seconds to import) so dry runs over many variants
(`cem-ablate train --dry-run`, `cem-ablate study --dry-run`) stay fast.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from cem_ablate.config.identity import digest
from cem_ablate.model.config import ModelConfig
from cem_ablate.model.report import ModelReport, model_report
from cem_ablate.training.config import RunConfig

if TYPE_CHECKING:  # type-only: build_network imports each network's module only for its task
    from cem_ablate.model.transformer import CEMTransformer
    from cem_ablate.training.gp_regressor import GPRegressor


def build_network(cfg: RunConfig, vocab_size: int | None = None) -> tuple[nn.Module, ModelConfig | None]:
    """The model of a run (on the current default device) and, for LMs, its config."""
    if cfg.data.task == "gp":
        from cem_ablate.training.gp_regressor import GPRegressor

        return GPRegressor(cfg.model, cfg.data.gp.dim), None
    from cem_ablate.model.assembly import build_model

    model_config = cfg.training_model(vocab_size)
    return build_model(model_config), model_config


def network_report(cfg: RunConfig, model: nn.Module) -> ModelReport:
    if cfg.data.task == "gp":
        return cast("GPRegressor", model).report()  # build_network's network for task gp
    return model_report(cast("CEMTransformer", model), cfg.data.block_size)


_DESCRIPTIONS: dict[str, tuple[ModelReport, ModelConfig | None]] = {}


def describe_network(cfg: RunConfig) -> tuple[ModelReport, ModelConfig | None]:
    """Parameter counts and FLOPs without allocating weights (meta device). Remembered per
    process by the sections they depend on (model, data): a dry run describes every variant, and a
    transfer's costs describe it again as proxy, target and grid, while building a model on the meta
    device still runs every init (measured: remembering halves the figure studies'
    transfer-cost test; figures in docs/lab-notes/from-code-comments.md)."""
    mapping = cfg.to_mapping()
    key = digest({"model": mapping["model"], "data": mapping["data"]})
    if key not in _DESCRIPTIONS:
        with torch.device("meta"):
            model, model_config = build_network(cfg)
        _DESCRIPTIONS[key] = (network_report(cfg, model), model_config)
    report, model_config = _DESCRIPTIONS[key]
    # a copy: callers own their report (its dicts are mutable)
    return dataclasses.replace(
        report, params_by_component=dict(report.params_by_component), flops_by_module=dict(report.flops_by_module)
    ), model_config
