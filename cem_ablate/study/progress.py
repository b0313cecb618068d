"""Study-level progress, read from the Optuna storage (so it sees every worker).

    [ 7/15] 6 finished, 1 diverged, 0 failed | 2 running, 6 queued | best: cem_attention lr=0.002 ppl 11.87

The coordinator prints one such line whenever a trial starts or ends, and an event
line per ended trial.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import FINAL_STATES, TrialStatus
from cem_ablate.study.session_protocols import QueueSession


@dataclass(frozen=True)
class Snapshot:
    slot_counts: Counter  # slot state -> number of slots (all variants)
    total: int
    best: tuple[str, TrialRecord] | None  # (variant name, its best finished trial)
    trials: dict[tuple[str, int], tuple[str, TrialRecord]]  # (variant key, trial number) -> (variant, point)

    @property
    def done(self) -> int:
        return sum(self.slot_counts[s] for s in FINAL_STATES)

    @property
    def complete(self) -> bool:
        return self.done == self.total

    def line(self) -> str:
        c, s = self.slot_counts, TrialStatus
        text = (
            f"[{self.done:>2}/{self.total}] {c[s.FINISHED]} finished, {c[s.DIVERGED]} diverged, "
            f"{c[s.FAILED]} failed"
            + (f", {c[s.PRUNED]} pruned" if c[s.PRUNED] else "")
            + f" | {c[s.RUNNING]} running, {c[s.WAITING] + c[s.MISSING]} queued"
        )
        if self.best is not None:
            name, point = self.best
            text += f" | best: {name} lr={point.lr:.3g} -> {point.value:.4g}"
        return text


def snapshot(session: QueueSession[Any]) -> Snapshot:
    counts: Counter = Counter()
    best: tuple[str, TrialRecord] | None = None
    best_value = math.inf  # best's value
    trials: dict[tuple[str, int], tuple[str, TrialRecord]] = {}
    total = 0
    for variant in session.variants:
        vt = session.trials[variant.key]
        states = vt.slot_states()
        counts.update(states.values())
        total += len(states)
        for point in vt.points():
            assert point.number is not None  # VariantTrials.points numbers every record
            trials[(variant.key, point.number)] = (variant.name, point)
            if point.status == TrialStatus.FINISHED and point.value is not None and math.isfinite(point.value):
                if best is None or point.value < best_value:
                    best, best_value = (variant.name, point), point.value
    return Snapshot(counts, total, best, trials)


def _label(variant: str, point: TrialRecord) -> str:
    if point.lr is None:
        return f"{variant} {point.slot}"
    return f"{variant} lr={point.lr:.3g} seed={point.seed}"


def describe_point(variant: str, point: TrialRecord) -> str:
    if point.status == TrialStatus.FINISHED:
        return f"{_label(variant, point)}: finished, {point.value:.4g}"
    if point.reason:
        return f"{_label(variant, point)}: {point.status} ({point.reason})"
    return f"{_label(variant, point)}: {point.status}"


def changes(before: Snapshot | None, after: Snapshot) -> list[str]:
    """Event lines for trials that started or ended between two snapshots."""
    if before is None:
        return []
    out = []
    for key, (variant, point) in sorted(after.trials.items(), key=lambda kv: kv[0][1]):  # by trial number
        old = before.trials.get(key)
        if old is not None and old[1].status == point.status:
            continue
        if point.status == TrialStatus.RUNNING:
            out.append(f"  started  {_label(variant, point)}")
        elif point.status in FINAL_STATES:
            out.append(f"  ended    {describe_point(variant, point)}")
    return out
