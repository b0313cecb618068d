"""Per task (text, MQAR, GP): which data module, model and LightningModule train it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import lightning as L
from torch import nn

from cem_ablate.model.report import ModelReport
from cem_ablate.training.budget import Budget
from cem_ablate.training.config import RunConfig
from cem_ablate.training.device_profile import DeviceProfile
from cem_ablate.training.networks import build_network, network_report
from cem_ablate.training.recipe import RecipeModule

if TYPE_CHECKING:  # type-only: build_task imports a task's modules only when it runs that task
    from cem_ablate.model.transformer import CEMTransformer
    from cem_ablate.training.gp_regressor import GPRegressor


@dataclass
class Task:
    datamodule: L.LightningDataModule
    module: RecipeModule  # the engine reads its divergence and validation fields directly
    report: ModelReport
    data_facts: dict[str, Any]


def build_task(cfg: RunConfig, budget: Budget, profile: DeviceProfile) -> Task:
    """Prepare the data (tokenizer, caches), then build the model around its vocabulary;
    the module trains with `profile`'s device choices."""
    loader_options = dict(
        batch_size=cfg.train.batch_size,
        eval_batch_size=cfg.train.eval_batch_size,
        seed=cfg.train.seed,
        total_micro_batches=budget.micro_batches,
        accumulation=budget.accumulation,
    )
    task = cfg.data.task
    datamodule: L.LightningDataModule
    vocab_size: int | None
    if task == "text":
        from cem_ablate.data.text_datamodule import TextDataModule

        datamodule = TextDataModule(cfg.data, **loader_options)
        vocab_size = datamodule.vocab_size  # prepares the tokenizer and token cache
    elif task == "mqar":
        from cem_ablate.data.mqar import MQARDataModule

        datamodule = MQARDataModule(cfg.data, **loader_options)
        vocab_size = cfg.data.mqar.vocab_size
    else:
        from cem_ablate.data.gp import GPDataModule

        datamodule = GPDataModule(
            cfg.data.gp, cache_dir=cfg.data.cache_dir, num_workers=cfg.data.num_workers, **loader_options
        )
        vocab_size = None
    model, _ = build_network(cfg, vocab_size)  # a GPRegressor for task gp, else a CEMTransformer
    report = network_report(cfg, model)
    if profile.compile:
        compile_blocks(model, profile.compile_backend)
    if task == "gp":
        from cem_ablate.training.gp_regression import GPRegressionModule

        module: RecipeModule = GPRegressionModule(cast("GPRegressor", model), cfg.train, budget, profile)
    else:
        from cem_ablate.training.language_model import LanguageModelModule

        module = LanguageModelModule(
            cast("CEMTransformer", model), cfg.train, budget, recall_metric=task == "mqar", profile=profile
        )
    return Task(datamodule, module, report, datamodule.describe())


def compile_blocks(model: nn.Module, backend: str = "inductor") -> None:
    """torch.compile each block in place (one graph per block: short compiles, reused)."""
    for block in cast(Iterable[nn.Module], model.blocks):  # Module.__getattr__ types it as Tensor | Module
        block.compile(backend=backend)
