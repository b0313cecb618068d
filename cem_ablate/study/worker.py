"""The worker loop: claim a queued trial of some variant, train it, repeat.

Any number of workers (processes, machines) run this loop against one storage.
Variants are visited round-robin, starting at a different one per worker, so
results arrive for every variant early. When nothing is queued but trials are still
running elsewhere, the worker waits: a running trial of a dead worker goes stale and
is queued again, and this worker may be the one to retry it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cem_ablate.study.trial_run import TrialOutcome, run_trial
from cem_ablate.study.trials import worker_identity

IDLE_POLL_S = 2.0


def work(session, worker_index: int = 0,
         on_start: Callable[[str, object], None] | None = None,
         on_end: Callable[[TrialOutcome], None] | None = None) -> list[TrialOutcome]:
    identity = worker_identity()
    variants = session.variants
    outcomes: list[TrialOutcome] = []
    turn = worker_index
    while True:
        claimed = None
        for i in range(len(variants)):
            variant = variants[(turn + i) % len(variants)]
            trial = session.trials[variant.key].claim(identity)
            if trial is not None:
                claimed = (variant, trial)
                break
        if claimed is None:
            if any(t.has_running() for t in session.trials.values()):
                time.sleep(IDLE_POLL_S)
                continue
            return outcomes
        variant, trial = claimed
        turn = variants.index(variant) + 1
        if on_start is not None:
            on_start(variant.name, trial)
        outcome = run_trial(session, variant, trial)
        outcomes.append(outcome)
        if on_end is not None:
            on_end(outcome)
