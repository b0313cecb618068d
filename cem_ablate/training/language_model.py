"""Next-token prediction around any `build_model` model (text and MQAR tasks).

Loss: mean token cross-entropy over targets that are not `IGNORE_INDEX` (MQAR
scores only the query positions), computed by the head + loss unit
(`training.head_loss`, the benchmark's too): the device profile's `loss_impl` picks plain or
chunked (`auto`: chunked on CUDA, plain on CPU), and `train.compile` compiles the unit as one
graph beside the blocks. Evaluation: perplexity through torchmetrics
(exact over the whole evaluation set and synced across ranks), logged as
`{stage}_ppl` and `{stage}_loss` = log(ppl) - the study's pruning callback reads
`val_loss` - plus `{stage}_recall_acc` for MQAR. At each validation, CEM models also
log the energy before and after every recursion step on one batch (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp:
the steps should descend), as `energy/<sublayer>/step<t>`.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from cem_ablate.data.mqar import IGNORE_INDEX
from cem_ablate.model.transformer import CEMTransformer
from cem_ablate.training.budget import Budget
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.device_profile import DeviceProfile
from cem_ablate.training.head_loss import HeadLoss, head_loss_unit
from cem_ablate.training.recipe import RecipeModule

STAGES = ("val", "test")
Batch = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets)


class LanguageModelModule(RecipeModule):
    model: CEMTransformer

    def __init__(
        self,
        model: CEMTransformer,
        train: TrainConfig,
        budget: Budget,
        *,
        recall_metric: bool = False,
        profile: DeviceProfile | None = None,
    ) -> None:
        super().__init__(model, train, budget, profile)
        vocab_size = model.dims.vocab_size
        self.metrics = nn.ModuleDict()
        for stage in STAGES:
            metrics: dict[str, Metric | MetricCollection] = {"ppl": Perplexity(ignore_index=IGNORE_INDEX)}
            if recall_metric:
                metrics["recall_acc"] = MulticlassAccuracy(vocab_size, average="micro", ignore_index=IGNORE_INDEX)
            self.metrics[stage] = MetricCollection(metrics, prefix=f"{stage}_")
        self.track_energy = bool(getattr(model, "cem_sublayers", dict)())
        self.energy: dict[str, float] = {}
        self._head_loss: HeadLoss | None = None  # built on the first step, once the device is known

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def head_loss(self) -> HeadLoss:
        """The head + loss unit for the device the model trains on."""
        if self._head_loss is None:
            profile = self.device_profile
            self._head_loss = head_loss_unit(
                self.model,
                profile.loss_impl,
                compile=profile.compile,
                backend=profile.compile_backend,
                ignore_index=IGNORE_INDEX,
            )
        return self._head_loss

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor | None:
        inputs, targets = batch
        loss = self.head_loss()(self.model.hidden_states(inputs), targets)
        return self.checked_loss(loss)

    def extra_training_metrics(self, loss: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"train_ppl": loss.exp()}

    def _metrics(self, stage: str) -> MetricCollection:
        return cast(MetricCollection, self.metrics[stage])  # torch types a ModuleDict's items as Module

    def _evaluate(self, stage: str, batch: Batch) -> None:
        inputs, targets = batch
        logits = self.model(inputs).float()
        self._metrics(stage)["ppl"].update(logits, targets)
        if "recall_acc" in self._metrics(stage):
            self._metrics(stage)["recall_acc"].update(logits.argmax(-1).flatten(), targets.flatten())

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate("val", batch)
        if batch_idx == 0 and self.track_energy:
            self.model.set_energy_tracking(True)
            self.model(batch[0])
            self.energy = self.model.energy_trace()
            self.model.set_energy_tracking(False)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate("test", batch)

    def _log_stage(self, stage: str) -> None:
        values = self._metrics(stage).compute()  # synced across ranks
        ppl = values[f"{stage}_ppl"]
        values[f"{stage}_loss"] = ppl.log()
        self.log_dict(
            values, prog_bar=stage == "val", sync_dist=True
        )  # already synced by torchmetrics: silences the DDP hint
        self._metrics(stage).reset()

    def on_validation_epoch_end(self) -> None:
        self._log_stage("val")
        if self.energy:
            self.log_dict({f"energy/{k}": v for k, v in self.energy.items()}, rank_zero_only=True)
            self.energy = {}

    def on_test_epoch_end(self) -> None:
        self._log_stage("test")
