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

from dataclasses import dataclass, field

from cem_ablate.config.fingerprint import CodeFingerprint
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import FINAL_STATES, SETTLED, TrialStatus
from cem_ablate.study.ledger import TrialFacts, trial_facts
from cem_ablate.study.staleness import StaleCause, stale_cause
from cem_ablate.study.trials import trial_status

__all__ = ["StaleTrials", "dry_run_reads", "expected_reuse", "finished_trials"]


def finished_trials(storage) -> dict[str, TrialRecord]:
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
                    lr, seed, status, t.value if status == TrialStatus.FINISHED else None,
                    facts.reason, slot=facts.slot, trial_key=key,
                    study=study.study_name, number=t.number, run_id=facts.mlflow_run_id,
                    reused_from=facts.reused_from, attrs=facts.outcome() | {"reason": facts.reason})
    return out


GridTrials = dict[tuple[str, float, int], TrialRecord]  # (variant key, lr, seed) -> its settled trial


@dataclass(frozen=True)
class StaleTrials:
    """The grid trials this study finished under another trial key than they have now
    (a run retrains them, study/trials.py), and why (study/staleness.py)."""

    counts: dict[str, int] = field(default_factory=dict)  # variant key -> how many
    cause: StaleCause | None = None  # None when there are none

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def dry_run_reads(expanded, storage_url: str) -> tuple[GridTrials, StaleTrials]:
    """What the dry run reads of a storage, in one read-only open (a missing SQLite file is
    not created; nothing without a storage or a grid: sampled lrs can't be known):

    - the grid: (variant key, lr, seed) -> the trial the storage holds settled (finished
      or diverged) for that grid point under the current code, from any study (its trial
      key), for every seed the study may train;
    - the stale trials: how many grid trials of each variant this study finished under
      another trial key than they have now (code, data or platform version changed), and
      what changed."""
    from cem_ablate.study.storage import open_for_reading

    if expanded.spec.lr_search.method != "grid":
        return {}, StaleTrials()
    with open_for_reading(storage_url) as storage:
        if storage is None:
            return {}, StaleTrials()
        return _grid_from(expanded, finished_trials(storage)), _stale_trials(expanded, storage)


def _grid_from(expanded, finished: dict[str, TrialRecord]) -> GridTrials:
    spec = expanded.spec
    out: GridTrials = {}
    for v in expanded.variants:
        for lr in v.lr_search(spec.lr_search).grid:
            for seed in spec.seeds:
                record = finished.get(v.trial_key(lr, seed))
                if record is not None:
                    out[(v.key, lr, seed)] = record
    return out


def expected_reuse(expanded, grid: GridTrials) -> tuple[dict[str, int], dict[str, int]]:
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


def _stale_trials(expanded, storage) -> StaleTrials:
    from cem_ablate.study.variants import optuna_study_name

    counts: dict[str, int] = {}
    causes: list[tuple[CodeFingerprint, TrialFacts]] = []
    for v in expanded.variants:
        try:
            study_id = storage.get_study_id_from_name(optuna_study_name(expanded.spec.name, v))
        except KeyError:
            continue
        current: dict[tuple[float, int], str] = {}
        recorded: dict[tuple[float, int], list[TrialFacts]] = {}
        for t in storage.get_all_trials(study_id, deepcopy=False):
            lr, seed, facts = t.params.get("lr"), t.params.get("seed"), trial_facts(t)
            if lr is None or seed is None or not facts.trial_key or trial_status(t) not in FINAL_STATES:
                continue
            point = (float(lr), int(seed))
            if point not in current:
                current[point] = v.trial_key(*point)
            recorded.setdefault(point, []).append(facts)
        stale = [trials for point, trials in recorded.items() if current[point] not in {f.trial_key for f in trials}]
        if stale:
            counts[v.key] = len(stale)
            code = v.config.code_fingerprint()
            causes += [(code, facts) for trials in stale for facts in trials]
    return StaleTrials(counts, stale_cause(causes) if causes else None)
