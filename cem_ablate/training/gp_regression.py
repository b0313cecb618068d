"""Training a `GPRegressor` (docs/design/experiments.md#s9-gaussian-process-study): mean squared error loss, RMSE metric.

Logs `val_rmse` / `test_rmse`, and `val_loss` = validation MSE (what pruning reads).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanSquaredError

from cem_ablate.training.budget import Budget
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.device_profile import DeviceProfile
from cem_ablate.training.gp_regressor import GPRegressor
from cem_ablate.training.recipe import RecipeModule

Batch = tuple[torch.Tensor, torch.Tensor]  # (x, y)


class GPRegressionModule(RecipeModule):
    model: GPRegressor

    def __init__(
        self, model: GPRegressor, train: TrainConfig, budget: Budget, profile: DeviceProfile | None = None
    ) -> None:
        super().__init__(model, train, budget, profile)
        self.rmse = nn.ModuleDict({stage: MeanSquaredError(squared=False) for stage in ("val", "test")})

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor | None:
        x, y = batch
        return self.checked_loss(F.mse_loss(self.model(x).float(), y))

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        x, y = batch
        self._rmse("val").update(self.model(x).float(), y)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        x, y = batch
        self._rmse("test").update(self.model(x).float(), y)

    def _rmse(self, stage: str) -> MeanSquaredError:
        return cast(MeanSquaredError, self.rmse[stage])  # torch types a ModuleDict's items as Module

    def _log_stage(self, stage: str) -> None:
        rmse = self._rmse(stage).compute()
        self.log_dict(
            {f"{stage}_rmse": rmse, f"{stage}_loss": rmse.square()}, prog_bar=stage == "val", sync_dist=True
        )  # already synced by torchmetrics: silences the DDP hint
        self._rmse(stage).reset()

    def on_validation_epoch_end(self) -> None:
        self._log_stage("val")

    def on_test_epoch_end(self) -> None:
        self._log_stage("test")
