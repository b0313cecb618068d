"""How a trial attempt ended, and what that means for the study: one typed value, one table.

An attempt ends in one `Cause`. It is decided where the attempt ends (the engine for a
run's own end, `training.failure.failure_of` for anything raised) and carried unchanged:
the engine's `TrainResult.cause` and `result.json`, the study's ledger (the trial's `cause`
fact, `study/ledger.py`), the MLflow child's tag `cem_ablate.cause` (`tracking/outcome.py`)
and the report's trial rows read it back. Nothing downstream re-derives it from a message.

What each cause means is decided here, once (`MEANINGS`; its table: docs/design/experiments.md#s8-1-trial-outcomes): the status the trial's record
holds, whether it is the run's own result (written by the engine) or a stop of the attempt,
when its slot is trained again, and whether the process stops on it (and with which exit
status). The engine, the trial runner, the worker and the CLI read this table; none of
them keeps its own list of failures.

Here, under `config`, because every layer that records or reads an outcome (`training`,
`study`, `tracking`, `reporting`) may import `config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from cem_ablate.config.trial_status import TrialStatus


class Cause(str, Enum):
    """Why an attempt ended. Stored strings (ledger, MLflow tag, `result.json`): never rename."""

    FINISHED = "finished"  # trained to the end with a finite objective
    NOT_FINITE = "not_finite"  # a loss or the final objective not finite: diverged
    PRUNED = "pruned"  # stopped early by the pruner
    OUT_OF_MEMORY = "out_of_memory"  # the device ran out of memory (training.out_of_memory)
    ERROR = "error"  # the run raised; the reason names the exception
    BAD_INPUT = "bad_input"  # a ConfigError: the config, a store or a file cannot be used as given
    PREEMPTED = "preempted"  # a stop signal: a verified checkpoint saved (training.preemption)
    CLAIM_LOST = "claim_lost"  # fenced: another worker owns the trial now (training.lease)
    INTERRUPTED = "interrupted"  # Ctrl-C / SystemExit
    DISK_FULL = "disk_full"  # a write failed for want of disk space (tracking.disk_space)
    SERVER_LOST = "server_lost"  # the MLflow server stayed away past its retry window

    __str__ = str.__str__

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    @classmethod
    def read(cls, stored: str | None) -> Cause | None:
        """The cause a store holds; None for a record written before causes were stored."""
        return cls(stored) if stored else None


@dataclass(frozen=True)
class Meaning:
    """What one cause means for the trial, its slot and the process."""

    status: TrialStatus  # what the trial's record holds
    run_result: bool  # the engine ends the run with it as its result (result.json, MLflow outcome)
    retried: str  # when the slot is trained again: "never", "next invocation", "now", "elsewhere"
    stops_process: bool  # a worker or a command stops on it (after releasing the slot)
    exit_status: int  # a command that ends on it exits with this (a signal's own: 128 + its number)

    @property
    def says_one_line(self) -> bool:
        """A process that ends on it prints one `error:` line (the input's or the machine's
        failure, exit status 2), not a traceback (which an unexpected error keeps)."""
        return self.exit_status == ONE_LINE_EXIT


ONE_LINE_EXIT = 2  # bad input, a full disk, a lost server: one `error:` line, like argparse's usage errors

# The one table. A result is recorded once and not retried within an invocation; a stop
# releases the slot at once (its checkpoint is kept) so the rerun resumes it.
MEANINGS: dict[Cause, Meaning] = {
    Cause.FINISHED: Meaning(TrialStatus.FINISHED, True, "never", False, 0),
    Cause.NOT_FINITE: Meaning(TrialStatus.DIVERGED, True, "never", False, 0),
    Cause.PRUNED: Meaning(TrialStatus.PRUNED, False, "never", False, 0),
    Cause.OUT_OF_MEMORY: Meaning(TrialStatus.FAILED, True, "next invocation", False, 1),
    Cause.ERROR: Meaning(TrialStatus.FAILED, True, "next invocation", False, 1),
    # A study trial records it as failed; a single `cem-ablate train` ends on its one `error:` line.
    Cause.BAD_INPUT: Meaning(TrialStatus.FAILED, False, "next invocation", False, 2),
    Cause.PREEMPTED: Meaning(TrialStatus.WAITING, False, "now", True, 128),
    Cause.CLAIM_LOST: Meaning(TrialStatus.KILLED, False, "elsewhere", False, 1),
    Cause.INTERRUPTED: Meaning(TrialStatus.KILLED, False, "now", True, 130),
    Cause.DISK_FULL: Meaning(TrialStatus.KILLED, False, "now", True, 2),
    Cause.SERVER_LOST: Meaning(TrialStatus.WAITING, False, "now", True, 2),
}


@dataclass(frozen=True)
class TrialOutcome:
    """One attempt's end: its cause, the line that says it, and the objective where finished."""

    cause: Cause
    reason: str = ""
    value: float | None = None  # the objective; finished only

    @property
    def meaning(self) -> Meaning:
        return MEANINGS[self.cause]

    @property
    def status(self) -> TrialStatus:
        return self.meaning.status
