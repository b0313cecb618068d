"""Trial reuse across studies: a trial is trained once per storage, whatever study asks.

Two trials with the same `RunConfig.trial_key()` train the same function on the same
data with the same code (training/config.py), so a finished (or diverged) trial of
any study in the Optuna storage is a result for every later study that contains it:
the paper's figure studies share their Llama baselines, which would otherwise be
retrained by each. A reused trial is recorded in the new study with its value and
`reused_from = "<study>#<trial number>"`; its MLflow child in the new experiment
carries the original's final metrics and the tag `cem_ablate.reused_from` (the
original child run's id). `cem-ablate study --no-reuse` trains everything.

The code is part of the key (the code fingerprint, config/fingerprint.py): after an
edit of what a platform or component module a config uses runs (not of its comments,
docstrings or layout), its trials have new keys, so
nothing trained before the edit is reused, and a rerun of the same study retrains
the trials it finished under other code (study/trials.py: stale trials).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cem_ablate.config.fingerprint import CodeFingerprint
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import FINAL_STATES, SETTLED, TrialStatus
from cem_ablate.study.ledger import TrialFacts, trial_facts
from cem_ablate.study.staleness import StaleCause, stale_cause
from cem_ablate.study.trials import trial_status

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from cem_ablate.study.variants import ExpandedStudy, Variant

__all__ = ["StaleTrials", "dry_run_reads", "expected_reuse", "finished_trials"]


def finished_trials(storage: BaseStorage) -> dict[str, TrialRecord]:
    """trial key -> the first finished or diverged trial with that key, in any study (results
    that retraining would not change), how it ended (`TrialFacts.outcome` and its reason)
    in `attrs` for the reuse to copy."""
    from optuna.trial import TrialState

    out: dict[str, TrialRecord] = {}
    for study in storage.get_all_studies():
        study_id = storage.get_study_id_from_name(study.study_name)
        for t in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            facts = trial_facts(t)
            key = facts.trial_key
            status = trial_status(t)
            if key and key not in out and status in SETTLED:
                lr, seed = t.params.get("lr"), t.params.get("seed")
                out[key] = TrialRecord(
                    lr,
                    seed,
                    status,
                    t.value if status == TrialStatus.FINISHED else None,
                    facts.reason,
                    slot=facts.slot,
                    trial_key=key,
                    study=study.study_name,
                    number=t.number,
                    run_id=facts.mlflow_run_id,
                    reused_from=facts.reused_from,
                    attrs=facts.outcome() | {"reason": facts.reason},
                )
    return out


GridTrials = dict[tuple[str, float, int], TrialRecord]  # (variant key, lr, seed) -> its settled trial


@dataclass(frozen=True)
class StaleTrials:
    """The grid trials this study finished under another trial key than they have now
    (a run retrains them, study/trials.py), and why (study/staleness.py); and the grid
    points a run trains although other studies of the storage settled them, under
    another trial key only (not reused), and why."""

    counts: dict[str, int] = field(default_factory=dict)  # variant key -> how many
    cause: StaleCause | None = None  # None when there are none
    elsewhere: dict[str, int] = field(default_factory=dict)  # variant key -> grid points not reused
    elsewhere_cause: StaleCause | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def total_elsewhere(self) -> int:
        return sum(self.elsewhere.values())


def dry_run_reads(expanded: ExpandedStudy, storage_url: str) -> tuple[GridTrials, StaleTrials]:
    """What the dry run reads of a storage, in one read-only open (a missing SQLite file is
    not created; nothing without a storage or a grid: sampled lrs can't be known):

    - the grid: (variant key, lr, seed) -> the trial the storage holds settled (finished
      or diverged) for that grid point under the current code, from any study (its trial
      key), for every seed the study may train;
    - the stale trials: how many grid trials of each variant this study finished under
      another trial key than they have now (code, data or platform version changed), how
      many of its other grid points only other studies settled, under other keys (not
      reused), and what changed."""
    from cem_ablate.study.storage import open_for_reading

    if expanded.spec.lr_search.method != "grid":
        return {}, StaleTrials()
    with open_for_reading(storage_url) as storage:
        if storage is None:
            return {}, StaleTrials()
        grid = _grid_from(expanded, finished_trials(storage))
        own = _own_trials(expanded, storage)
        counts, cause = _stale_own(expanded, own)
        # a point this study holds (current or stale) is its own to keep or retrain
        elsewhere, elsewhere_cause = _not_reused(expanded, storage, set(grid) | set(own))
        return grid, StaleTrials(counts, cause, elsewhere, elsewhere_cause)


def _grid_from(expanded: ExpandedStudy, finished: dict[str, TrialRecord]) -> GridTrials:
    spec = expanded.spec
    out: GridTrials = {}
    for v in expanded.variants:
        for lr in v.lr_search(spec.lr_search).grid:
            for seed in spec.seeds:
                record = finished.get(v.trial_key(lr, seed))
                if record is not None:
                    out[(v.key, lr, seed)] = record
    return out


def expected_reuse(expanded: ExpandedStudy, grid: GridTrials) -> tuple[dict[str, int], dict[str, int]]:
    """(reused, done): variant key -> how many of its grid trials (`dry_run_reads`) the
    storage holds settled by other studies (reused, not retrained), and by this study
    itself (a rerun: already done)."""
    from cem_ablate.study.variants import optuna_study_name

    own = {v.key: optuna_study_name(expanded.spec.name, v) for v in expanded.variants}
    reused: dict[str, int] = {}
    done: dict[str, int] = {}
    for (key, _, _), original in grid.items():
        counts = done if original.study == own[key] else reused
        counts[key] = counts.get(key, 0) + 1
    return reused, done


def _own_trials(expanded: ExpandedStudy, storage: BaseStorage) -> dict[tuple[str, float, int], list[TrialFacts]]:
    """(variant key, lr, seed) -> the facts of this study's final trials at that point, under
    any trial key."""
    from cem_ablate.study.variants import optuna_study_name

    out: dict[tuple[str, float, int], list[TrialFacts]] = {}
    for v in expanded.variants:
        try:
            study_id = storage.get_study_id_from_name(optuna_study_name(expanded.spec.name, v))
        except KeyError:
            continue
        for t in storage.get_all_trials(study_id, deepcopy=False):
            lr, seed, facts = t.params.get("lr"), t.params.get("seed"), trial_facts(t)
            if lr is not None and seed is not None and facts.trial_key and trial_status(t) in FINAL_STATES:
                out.setdefault((v.key, float(lr), int(seed)), []).append(facts)
    return out


def _stale_own(
    expanded: ExpandedStudy, own: dict[tuple[str, float, int], list[TrialFacts]]
) -> tuple[dict[str, int], StaleCause | None]:
    """Variant key -> how many of its points this study holds under other trial keys only."""
    by_key = {v.key: v for v in expanded.variants}
    stale = {
        point: trials
        for point, trials in own.items()
        if by_key[point[0]].trial_key(point[1], point[2]) not in {f.trial_key for f in trials}
    }
    return _counts_and_cause(by_key, stale)


def _counts_and_cause(
    by_key: Mapping[str, Variant], stale: dict[tuple[str, float, int], list[TrialFacts]]
) -> tuple[dict[str, int], StaleCause | None]:
    """Variant key -> how many of `stale`'s points are its, and why their keys differ."""
    counts: dict[str, int] = {}
    for key, _, _ in stale:
        counts[key] = counts.get(key, 0) + 1
    causes: list[tuple[CodeFingerprint, TrialFacts]] = []
    for key in counts:
        code = by_key[key].config.code_fingerprint()
        causes += [(code, facts) for point, trials in stale.items() if point[0] == key for facts in trials]
    return counts, (stale_cause(causes) if causes else None)


def _not_reused(
    expanded: ExpandedStudy, storage: BaseStorage, covered: set[tuple[str, float, int]]
) -> tuple[dict[str, int], StaleCause | None]:
    """Variant key -> how many of its grid points not in `covered` other studies settled
    (finished or diverged) under another trial key only, and why those keys differ."""
    from optuna.trial import TrialState

    from cem_ablate.study.variants import optuna_study_name

    spec = expanded.spec
    by_key = {v.key: v for v in expanded.variants}
    own = {optuna_study_name(spec.name, v) for v in expanded.variants}
    wanted = {
        (v.key, float(lr), int(seed))
        for v in expanded.variants
        for lr in v.lr_search(spec.lr_search).grid
        for seed in spec.seeds
    } - covered
    found: dict[tuple[str, float, int], list[TrialFacts]] = {}
    for study in storage.get_all_studies():
        key = study.study_name.rpartition("/")[2]
        if key not in by_key or study.study_name in own:
            continue
        study_id = storage.get_study_id_from_name(study.study_name)
        for t in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            lr, seed, facts = t.params.get("lr"), t.params.get("seed"), trial_facts(t)
            if lr is None or seed is None or not facts.trial_key or trial_status(t) not in SETTLED:
                continue
            point = (key, float(lr), int(seed))
            if point in wanted:
                found.setdefault(point, []).append(facts)
    return _counts_and_cause(by_key, found)
