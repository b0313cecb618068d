"""A trial's status: the one vocabulary of how a trial (or a slot) stands.

Every layer that says how a trial ended uses this enum: the engine (`TrainResult`),
the study's Optuna queue (`study/trials.py`), reuse, the MLflow writer
(`tracking/outcome.py`) and reader (`tracking/readback.py`) and the reports. It lives
here, at the bottom of the layers, because `tracking` may import only `config`.

The values are stored strings: the Optuna user attribute `status`, the MLflow tag
`cem_ablate.status` and `result.json` of a run folder hold them, so renaming a value
would make every existing store unreadable (tests/config/test_trial_status.py pins
them). Convert at the edges: `.value` when writing, `TrialStatus.read` when reading.
A `str` subclass, so a member compares equal to its stored string and formats as it.
"""

from __future__ import annotations

from enum import Enum


class TrialStatus(str, Enum):
    FINISHED = "finished"  # a final objective (test perplexity, RMSE, recall error)
    DIVERGED = "diverged"  # non-finite loss or objective: a result, never retried
    FAILED = "failed"  # the run raised: recorded with the error, retried on the next invocation
    PRUNED = "pruned"  # stopped early by the pruner: a result
    KILLED = "killed"  # its worker died or was interrupted: queued again, resumes its checkpoint
    DUPLICATE = "duplicate"  # a second queued copy of a finished or running slot (study/trials.py)
    RUNNING = "running"  # claimed and training (MLflow: a child without a status tag)
    WAITING = "waiting"  # queued, not claimed yet
    MISSING = "missing"  # a slot with no trial yet (a slot's state, never a trial's)

    # Print and format as the stored string ("finished", not "TrialStatus.FINISHED"),
    # on every Python this package supports (3.10's Enum formats mixins differently).
    __str__ = str.__str__

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    @classmethod
    def read(cls, stored: str | None, default: TrialStatus | None = None) -> TrialStatus:
        """The status a store holds; `default` where it holds none. An unknown string
        raises ValueError naming it (a store written by other code), never a guess."""
        if stored is None and default is not None:
            return default
        try:
            return cls(stored)
        except ValueError:
            raise ValueError(
                f"unknown trial status {stored!r} in the store; expected one of {', '.join(s.value for s in cls)}"
            ) from None


# A run's own outcome (`TrainResult.status`, `cem-ablate train`): the engine ends in one of these.
RUN_OUTCOMES = (TrialStatus.FINISHED, TrialStatus.DIVERGED, TrialStatus.FAILED)
# Results that rerunning the same trial key would not change: reusable, and a run folder's
# result is final (training/run_directory.py, study/reuse.py).
SETTLED = (TrialStatus.FINISHED, TrialStatus.DIVERGED)
# A slot in one of these needs no more work (study/trials.py): FAILED is retried only by
# the next invocation, never within one.
FINAL_STATES = (TrialStatus.FINISHED, TrialStatus.DIVERGED, TrialStatus.PRUNED, TrialStatus.FAILED)
