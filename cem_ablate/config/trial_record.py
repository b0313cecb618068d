"""A trial as every reader sees it: one record, whatever store it was read from.

The study's Optuna queue (`VariantTrials.points`), trial reuse (`study/reuse.py`), a
trial just run (`study/trial_run.py`) and the MLflow readback of a study
(`tracking/readback.py`) all give `TrialRecord`s; progress lines, the coordinator's
summaries, the dry run and the report read them, and `analysis.statistics.observations`
turns the finished ones into observations. Each reader converts its store's shape
into this one at its edge (the status with `TrialStatus.read`), so nothing above
knows Optuna's attributes or MLflow's tags. Here, under `config`, because `tracking`
may import only `config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_status import TrialStatus


@dataclass(frozen=True)
class TrialRecord:
    lr: float | None  # None: a sampled slot that has not drawn its lr yet
    seed: int | None
    status: TrialStatus
    value: float | None = None  # the objective (test perplexity, RMSE, recall error); finished trials only
    reason: str = ""  # why it is not finished (the error, "pruned on validation loss", "reused from ...")
    variant: str = ""  # the variant's name, where the reader knows it
    slot: str = ""  # the slot it fills (study/trials.py), e.g. "lr=0.001,seed=0"
    trial_key: str = ""  # RunConfig.trial_key() it was trained under ("" before it is claimed)
    study: str = ""  # the Optuna study that holds it
    number: int | None = None  # its Optuna trial number in `study`
    run_id: str | None = None  # its MLflow child run
    reused_from: str = ""  # "<study>#<trial number>" of the original where it was reused (study/reuse.py)
    seconds: float = 0.0  # wall time of its training in this process (0: reused, or not known)
    cause: Cause | None = None  # why it ended (config.trial_outcome); None: not ended, or stored before causes
    # The store's own attributes it was read from (Optuna user attributes), for what a
    # reuse copies onto the new trial (steps, tokens seen, ...); no part of its identity.
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", TrialStatus(self.status))

    @property
    def reference(self) -> str:
        """ "<study>#<trial number>" of the trial that trained this result (the original of a reuse)."""
        return self.reused_from or f"{self.study}#{self.number}"
