"""What a training run returns (and writes to `<run_dir>/result.json`).

Its status is one of `config.trial_status.RUN_OUTCOMES` and its cause one of the
`config.trial_outcome.Cause`s that are a run's result; `result.json` holds their stored
strings (`to_dict` / `from_dict` are the edge; a file written before causes were stored
reads as its status's usual cause).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_status import TrialStatus


@dataclass
class TrainResult:
    status: TrialStatus  # finished / diverged / failed
    steps: int = 0  # optimizer steps completed
    tokens_seen: int = 0
    train_loss: float = math.nan  # last finite training loss
    val_loss: float = math.nan
    val_ppl: float = math.nan
    test_loss: float = math.nan
    test_ppl: float = math.nan
    rmse: float | None = None  # GP regression (test split)
    recall_accuracy: float | None = None  # MQAR (test split)
    tokens_per_sec: float = math.nan
    mfu: float = math.nan
    params: int = 0
    flops_per_token: float = 0.0  # forward, per token (x3 for training)
    diverged_step: int | None = None  # optimizer steps completed when the loss went non-finite
    error: str | None = None
    mlflow_run_id: str | None = None
    run_dir: str = ""
    seconds: float = 0.0  # wall time of the last session (a resumed run counts its own)
    cause: Cause | None = None  # why it ended (config.trial_outcome); None: its status's usual cause

    def __post_init__(self) -> None:
        if self.cause is None:
            usual = {TrialStatus.FINISHED: Cause.FINISHED, TrialStatus.DIVERGED: Cause.NOT_FINITE}
            self.cause = usual.get(TrialStatus(self.status), Cause.ERROR)
        self.cause = Cause(self.cause)

    @property
    def objective(self) -> float:
        """The number a study minimizes: test perplexity, RMSE for GP, recall error for MQAR."""
        if self.rmse is not None:
            return self.rmse
        if self.recall_accuracy is not None:
            return 1.0 - self.recall_accuracy
        return self.test_ppl

    def summary_metrics(self) -> dict[str, float | None]:
        """What a run adds to its own curves when it ends (size and throughput)."""
        return {
            "params": self.params,
            "flops_per_token": self.flops_per_token,
            "tokens_per_sec_mean": self.tokens_per_sec,
            "mfu_mean": self.mfu,
            "steps": self.steps,
            "diverged_step": self.diverged_step,
        }

    def outcome_metrics(self) -> dict[str, float | None]:
        """The final numbers of a study's trial record (non-finite ones are dropped by
        the writer): the summary, the objective and the task's final metrics, so a
        trial's child run answers the report without reading curves."""
        return self.summary_metrics() | {
            "objective": self.objective if self.status == TrialStatus.FINISHED else None,
            "test_ppl": self.test_ppl,
            "val_ppl": self.val_ppl,
            "test_loss": self.test_loss,
            "val_loss": self.val_loss,
            "test_rmse": self.rmse,
            "test_recall_acc": self.recall_accuracy,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: NaN becomes None, the status its stored string."""
        out = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in dataclasses.asdict(self).items()}
        return out | {"status": TrialStatus(self.status).value, "cause": Cause(self.cause).value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainResult:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in data.items():
            if key not in fields:
                continue
            if value is None and fields[key].default is not None and isinstance(fields[key].default, float):
                value = math.nan
            kwargs[key] = value
        if "status" in kwargs:
            kwargs["status"] = TrialStatus.read(kwargs["status"])
        return cls(**kwargs)
