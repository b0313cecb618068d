"""Who may still write a run's files: the lease on a run folder (fencing).

A study trial is trained under a claim (its Optuna trial, RUNNING). When a worker
stops (SIGSTOP, a frozen machine) past the grace period, its claim is failed as stale
and another worker retrains the slot in the same run folder, resuming its checkpoint.
The stopped worker may wake up later: it must then write nothing, not a checkpoint,
not `result.json`, not an MLflow point. So every write of a run goes through
`Lease.check()` first:

- `token`: the claim's name ("<optuna study>#<trial number>"), written into the run
  folder (`lease`) when an attempt takes the folder over; a token that is no longer the
  folder's means another attempt holds it now;
- `is_live`: asks the claim's owner (the study: is the Optuna trial still RUNNING?).

A run without a lease (`cem-ablate train`, a library call) writes unconditionally.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class LeaseLost(Exception):
    """This process's claim on the run was taken over: stop now and write nothing."""


@dataclass(frozen=True)
class Lease:
    token: str
    is_live: Callable[[], bool]

    def check(self, folder_lease: Path) -> None:
        """Raise `LeaseLost` unless the folder is still ours and our claim is live."""
        try:
            holder = folder_lease.read_text().strip()
        except OSError:
            holder = None
        if holder != self.token:
            raise LeaseLost(f"{folder_lease.parent} is held by {holder or 'nobody'}, not {self.token}")
        if not self.is_live():
            raise LeaseLost(f"the claim {self.token} is no longer live (failed as stale and retried elsewhere)")
