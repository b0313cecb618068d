"""Which of the coordinator's worker processes stopped making progress.

A worker that is stopped (SIGSTOP, a frozen process) stops beating its trial's
heartbeat; past the grace period (`--grace`) its trial is failed as stale — by the
coordinator itself, every poll, so it is noticed even while every other worker is
busy — and the slot is queued again for another worker. The stopped process still
exists: without this, the coordinator waited for it forever after every trial was
done. A worker is *stalled* when the newest trial it claimed was failed that way (a
FAIL without a recorded status, `study.ledger`) while the process lives; once it
wakes up and claims another trial it is not stalled any more (its old claim is
fenced: it wrote nothing for it, `study.trial_run`).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from cem_ablate.study.ledger import trial_facts
from cem_ablate.study.session_protocols import QueueSession
from cem_ablate.study.storage import claim_lock


@dataclass(frozen=True)
class Stall:
    pid: int
    trial: str  # "<optuna study>#<trial number>" of the claim it lost


def fail_lapsed_claims(session: QueueSession[Any]) -> None:
    """Fail as stale every RUNNING trial whose heartbeat is older than the grace period
    (what each worker does before claiming), so the slot is queued again now."""
    with claim_lock(session.settings.storage.url):
        for trials in session.trials.values():
            trials.fail_dead_trials()


def stalled(session: QueueSession[Any], pids: set[int]) -> dict[int, Stall]:
    """pid -> its lost claim, for the processes among `pids` (workers of this machine)
    whose newest claimed trial was failed as stale."""
    from optuna.trial import TrialState

    host = socket.gethostname()
    newest: dict[int, tuple] = {}
    for trials in session.trials.values():
        for t in trials.all_trials():
            worker = trial_facts(t).worker
            if not worker or worker.get("host") != host or worker.get("pid") not in pids or t.datetime_start is None:
                continue
            pid = int(worker["pid"])
            if pid not in newest or t.datetime_start > newest[pid][0].datetime_start:
                newest[pid] = (t, trials.study.study_name)
    return {
        pid: Stall(pid, f"{name}#{t.number}")
        for pid, (t, name) in newest.items()
        if t.state == TrialState.FAIL and trial_facts(t).status is None
    }
