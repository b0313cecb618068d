"""Next-token prediction around any `build_model` model (text and MQAR tasks).

Loss: mean token cross-entropy over targets that are not `IGNORE_INDEX` (MQAR
scores only the query positions). Evaluation: perplexity through torchmetrics
(exact over the whole evaluation set and synced across ranks), logged as
`{stage}_ppl` and `{stage}_loss` = log(ppl) - the study's pruning callback reads
`val_loss` - plus `{stage}_recall_acc` for MQAR. At each validation, CEM models also
log the energy before and after every recursion step on one batch (SPEC §2-§3:
the steps should descend), as `energy/<sublayer>/step<t>`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from cem_ablate.data.mqar import IGNORE_INDEX
from cem_ablate.training.budget import Budget
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.recipe import RecipeModule

STAGES = ("val", "test")


class LanguageModelModule(RecipeModule):
    def __init__(self, model: nn.Module, train: TrainConfig, budget: Budget, *, recall_metric: bool = False):
        super().__init__(model, train, budget)
        vocab_size = model.dims.vocab_size
        self.metrics = nn.ModuleDict()
        for stage in STAGES:
            metrics = {"ppl": Perplexity(ignore_index=IGNORE_INDEX)}
            if recall_metric:
                metrics["recall_acc"] = MulticlassAccuracy(
                    vocab_size, average="micro", ignore_index=IGNORE_INDEX
                )
            self.metrics[stage] = MetricCollection(metrics, prefix=f"{stage}_")
        self.track_energy = bool(getattr(model, "cem_sublayers", dict)())
        self.energy: dict[str, float] = {}

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        logits = self.model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX)
        loss = self.checked_loss(loss)
        if loss is not None:
            self.log("train_ppl", loss.detach().exp(), on_step=True, on_epoch=False)
        return loss

    def _evaluate(self, stage: str, batch) -> None:
        inputs, targets = batch
        logits = self.model(inputs).float()
        self.metrics[stage]["ppl"].update(logits, targets)
        if "recall_acc" in self.metrics[stage]:
            self.metrics[stage]["recall_acc"].update(logits.argmax(-1).flatten(), targets.flatten())

    def validation_step(self, batch, batch_idx):
        self._evaluate("val", batch)
        if batch_idx == 0 and self.track_energy:
            self.model.set_energy_tracking(True)
            self.model(batch[0])
            self.energy = self.model.energy_trace()
            self.model.set_energy_tracking(False)

    def test_step(self, batch, batch_idx):
        self._evaluate("test", batch)

    def _log_stage(self, stage: str) -> None:
        values = self.metrics[stage].compute()  # synced across ranks
        ppl = values[f"{stage}_ppl"]
        values[f"{stage}_loss"] = ppl.log()
        self.log_dict(values, prog_bar=stage == "val",
                      sync_dist=True)  # already synced by torchmetrics: silences the DDP hint
        self.metrics[stage].reset()

    def on_validation_epoch_end(self) -> None:
        self._log_stage("val")
        if self.energy:
            self.log_dict({f"energy/{k}": v for k, v in self.energy.items()}, rank_zero_only=True)
            self.energy = {}

    def on_test_epoch_end(self) -> None:
        self._log_stage("test")
