"""The ledger: what a study records in Optuna user attributes, typed, one writer, one reader.

Every fact a trial carries in the Optuna storage is a field of `TrialFacts`; every fact
an Optuna study (one per variant) carries is a field of `StudyFacts`. Nothing else in
the platform reads or writes Optuna user attributes: `trial_facts` / `study_facts`
read them (tolerant of every store written so far: a missing or odd attribute is the
field's default), `record_trial` / `record_study` write them, `enqueue` queues a
slot's trial with its first facts. The stored names and values are exactly those
studies have always written, so old stores read the same and new ones stay readable
by older versions.

    slot            "lr=0.001,seed=0": the slot the trial fills (study.trials)
    attempt         how many trials of its slot had been queued before it, plus one
    worker          {host, boot, pid, created}: the process that claimed it
    status          the stored `TrialStatus` string of a FAIL (diverged, failed, killed, duplicate)
    trial_key       `RunConfig.trial_key()` it trains under (stale when it is not current)
    code_fingerprint, code_parts   the code part of that key, and its per-file digests
    mlflow_run_id   its MLflow child run
    run_dir         its run folder
    reason, seconds, steps, tokens_seen, diverged_step   how it ended
    reused_from     "<study>#<trial number>" of the original it was reused from (study.reuse)

A study's: `variant`, `variant_key`, `labels`, `seeds_active` (sequential seeds) and
one `mlflow_parent_run_id:<tracking store digest>` per tracking store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

PARENT_PREFIX = "mlflow_parent_run_id:"


@dataclass(frozen=True)
class TrialFacts:
    slot: str = ""
    attempt: int | None = None
    worker: Mapping[str, Any] | None = None
    status: str | None = None  # the stored string; study.trials.trial_status makes it a TrialStatus
    trial_key: str = ""
    code_fingerprint: str = ""
    code_parts: Mapping[str, str] | None = None
    mlflow_run_id: str | None = None
    run_dir: str = ""
    reason: str = ""
    cause: str = ""  # a config.trial_outcome.Cause's stored string
    seconds: float | None = None
    steps: int | None = None
    tokens_seen: int | None = None
    diverged_step: int | None = None
    reused_from: str = ""

    def outcome(self) -> dict[str, Any]:
        """How it ended, as a reuse copies it onto another trial (the fields that are set)."""
        return {
            k: getattr(self, k)
            for k in ("steps", "tokens_seen", "seconds", "diverged_step")
            if getattr(self, k) is not None
        }


_TRIAL_FIELDS = {f.name: f for f in dataclasses.fields(TrialFacts)}
_TEXT = {"slot", "trial_key", "code_fingerprint", "run_dir", "reason", "cause", "reused_from"}


def trial_facts(trial: FrozenTrial | optuna.Trial) -> TrialFacts:
    """The one reader: an Optuna trial's (frozen or live) user attributes as `TrialFacts`."""
    attrs = trial.user_attrs
    values: dict[str, Any] = {}
    for name in _TRIAL_FIELDS:
        if name not in attrs or attrs[name] is None:
            continue
        value = attrs[name]
        if name in _TEXT:
            value = str(value)
        elif name in ("worker", "code_parts") and not isinstance(value, Mapping):
            continue
        values[name] = value
    return TrialFacts(**values)


def record_trial(storage: BaseStorage, trial_id: int, **facts: Any) -> None:
    """The one writer of a trial's facts (`storage.set_trial_user_attr`, which Optuna
    refuses with `UpdateFinishedTrialError` once the trial is finished: a fenced worker's
    write never lands). Only `TrialFacts` fields; None values are not written."""
    unknown = set(facts) - set(_TRIAL_FIELDS)
    if unknown:
        raise TypeError(f"not a trial fact: {', '.join(sorted(unknown))}")
    for name, value in facts.items():
        if value is not None:
            storage.set_trial_user_attr(trial_id, name, dict(value) if isinstance(value, Mapping) else value)


def enqueue(study: optuna.Study, params: Mapping[str, Any], slot: str, attempt: int) -> None:
    """Queue a slot's trial (WAITING, params fixed) with its first facts."""
    study.enqueue_trial(dict(params), user_attrs={"slot": slot, "attempt": attempt})


@dataclass(frozen=True)
class StudyFacts:
    variant: str = ""
    variant_key: str = ""
    labels: Mapping[str, Any] = field(default_factory=dict)
    seeds_active: int | None = None
    parents: Mapping[str, str] = field(default_factory=dict)  # tracking store digest -> parent run id

    def parent(self, store: str) -> str | None:
        return self.parents.get(store)


def study_facts(storage: BaseStorage, study_id: int) -> StudyFacts:
    """The one reader of an Optuna study's user attributes."""
    attrs = storage.get_study_user_attrs(study_id)
    seeds = attrs.get("seeds_active")
    return StudyFacts(
        variant=str(attrs.get("variant", "")),
        variant_key=str(attrs.get("variant_key", "")),
        labels=dict(attrs["labels"]) if isinstance(attrs.get("labels"), Mapping) else {},
        seeds_active=int(seeds) if seeds is not None else None,
        parents={k[len(PARENT_PREFIX) :]: str(v) for k, v in attrs.items() if k.startswith(PARENT_PREFIX) and v},
    )


def record_study(
    storage: BaseStorage,
    study_id: int,
    *,
    variant: str | None = None,
    variant_key: str | None = None,
    labels: Mapping[str, Any] | None = None,
    seeds_active: int | None = None,
    parent: tuple[str, str] | None = None,
) -> None:
    """The one writer of an Optuna study's user attributes; `parent`: (store digest, run id)."""
    values = {
        "variant": variant,
        "variant_key": variant_key,
        "labels": dict(labels) if labels is not None else None,
        "seeds_active": seeds_active,
    }
    if parent is not None:
        values[PARENT_PREFIX + parent[0]] = parent[1]
    for key, value in values.items():
        if value is not None:
            storage.set_study_user_attr(study_id, key, value)
