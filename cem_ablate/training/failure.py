"""What an exception means: its `Cause` and one line, decided in one place.

Every place that catches a failure broadly (the engine around a run, the study's trial
runner, a worker's and the CLI's process edges) hands the exception here and acts on the
`Failure` it gets back through `config.trial_outcome.MEANINGS`; none of them tests for
error types of its own. The order matters: a stop (signal, fence, Ctrl-C) before the
machine's failures (disk, server), before the input's, before the run's own error, so a
full disk met while saving a preemption checkpoint is still the machine's failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.config.errors import ConfigError
from cem_ablate.config.trial_outcome import Cause, TrialOutcome
from cem_ablate.tracking.disk_space import out_of_space, out_of_space_message
from cem_ablate.tracking.store import lost_tracking_server
from cem_ablate.training.lease import LeaseLost
from cem_ablate.training.out_of_memory import is_out_of_memory, out_of_memory_reason
from cem_ablate.training.preemption import Preempted


@dataclass(frozen=True)
class Failure:
    """An exception read as an outcome: `error` is what to raise on where the outcome is
    not this place's to record (the original, or the one line it becomes)."""

    outcome: TrialOutcome
    error: BaseException

    @property
    def cause(self) -> Cause:
        return self.outcome.cause


def failure_of(
    err: BaseException, places: Iterable[Path] = (), tracking_uri: str | None = None, device_type: str = "cpu"
) -> Failure:
    """The cause of `err`: `places` are where the process writes (for a full disk that names
    no file), `tracking_uri` the MLflow store (a lost server), `device_type` the device a run
    ran on (its memory, for an out-of-memory reason)."""
    places = list(places)
    if isinstance(err, Preempted):
        return Failure(TrialOutcome(Cause.PREEMPTED, str(err)), err)
    if isinstance(err, LeaseLost):
        return Failure(TrialOutcome(Cause.CLAIM_LOST, f"claim lost: {err}"), err)
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        return Failure(TrialOutcome(Cause.INTERRUPTED, "interrupted"), err)
    if out_of_space(err, places):
        return Failure(TrialOutcome(Cause.DISK_FULL, out_of_space_message(err, places)), err)
    lost = lost_tracking_server(err, tracking_uri or "")
    if lost is not None:
        return Failure(TrialOutcome(Cause.SERVER_LOST, str(lost)), lost)
    if isinstance(err, ConfigError):
        return Failure(TrialOutcome(Cause.BAD_INPUT, str(err)), err)
    if is_out_of_memory(err):
        return Failure(TrialOutcome(Cause.OUT_OF_MEMORY, out_of_memory_reason(err, device_type)), err)
    return Failure(TrialOutcome(Cause.ERROR, f"{type(err).__name__}: {err}".strip()), err)
