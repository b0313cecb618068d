"""A study opened against its stores: Optuna storage, MLflow experiment, run folders.

The coordinator (`cem-ablate study FILE`) calls `prepare()` once, before any worker
starts: it creates the Optuna study of every variant, queues unfinished slots (and
retries failed ones once), and creates the MLflow parent runs. Parent creation is
serialized through the Optuna storage: only the process whose `create_study`
succeeded (a unique name in the database) creates the parent; everyone else reads
its run id from the Optuna study's user attributes. So workers and machines started
together never make two parents for one variant.

`prepare()` also finds the trials finished under other code (stale: their trial key,
which holds the code fingerprint, is not the current one; study/trials.py), says so in
one line and tags their MLflow children stale; their slots are queued again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from cem_ablate.config.identity import digest
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.study.ledger import record_study, study_facts, trial_facts
from cem_ablate.study.settings import StudySettings
from cem_ablate.study.staleness import stale_cause
from cem_ablate.study.storage import claim_lock, close_storage, open_storage
from cem_ablate.study.trials import VariantTrials
from cem_ablate.study.variants import ExpandedStudy, Variant, optuna_study_name, slug

if TYPE_CHECKING:
    from cem_ablate.study.summary import StudyPublisher

PARENT_WAIT_S = 30.0  # how long to wait for a concurrent coordinator to create a parent


class StudySession:
    def __init__(self, expanded: ExpandedStudy, settings: StudySettings, worker_index: int = 0):
        from cem_ablate.tracking.study_runs import StudyTracker

        self.expanded = expanded
        self.spec = expanded.spec
        self.settings = settings
        self.storage = open_storage(settings.storage)
        self.tracker = StudyTracker(settings.tracking_uri, self.spec.name)
        self.trials: dict[str, VariantTrials] = {}
        self._finished: dict[str, TrialRecord] | None = (
            None  # trial key -> its finished TrialRecord, read once (study.reuse)
        )
        # trial keys another study of a campaign may finish while this one runs: read again on a miss
        self.shared_keys: frozenset[str] = frozenset()
        self._created: dict[str, bool] = {}
        self._parents: dict[str, str] = {}
        for variant in expanded.variants:
            trials, created = VariantTrials.open(
                self.storage,
                settings.storage.url,
                optuna_study_name(self.spec.name, variant),
                variant.lr_search(self.spec.lr_search),
                self.spec.seeds,
                worker_index,
                trial_key=variant.trial_key,
            )
            self.trials[variant.key] = trials
            self._created[variant.key] = created
            if created:
                record_study(
                    self.storage,
                    trials.study_id,
                    variant=variant.name,
                    variant_key=variant.key,
                    labels=variant.axis_values,
                )

    def close(self) -> None:
        """Close the storage's connections (the session is done with it)."""
        close_storage(self.storage)

    @property
    def variants(self) -> list[Variant]:
        return self.expanded.variants

    @property
    def title(self) -> str:
        return f"study {self.spec.name}"

    def queue(self) -> list[list[tuple[StudySession, Variant]]]:
        """What a worker claims from, in tiers (`study.worker.work`): one study is one tier."""
        return [[(self, v) for v in self.variants]]

    def waits(self, session: object, variant: Variant) -> Callable[[str], bool] | None:
        """Which of a variant's slots to leave queued for now: none in a study alone."""
        return None

    def publisher(self) -> StudyPublisher:
        """The parents' publisher of this study run, its pairs checked once (`study.pairing`)."""
        from cem_ablate.study.pairing import pair_study
        from cem_ablate.study.summary import StudyPublisher

        return StudyPublisher(self, pair_study(self.variants))

    def add_seeds(self, publisher: StudyPublisher) -> list[str]:
        """Sequential seeds: one more where a Δ is unresolved (`study.sequential`)."""
        from cem_ablate.study.sequential import add_seeds

        return add_seeds(self, publisher)

    @property
    def study_dir(self) -> Path:
        return self.settings.workdir / self.spec.name

    def run_dir(self, variant: Variant, slot_key: str, trial_key: str) -> Path:
        """The trial's folder: readable slot plus trial key, the same on every machine
        that shares --workdir (so a retried trial resumes the killed attempt)."""
        return self.study_dir / variant.key / f"{slug(slot_key, limit=80)}-{trial_key}"

    def prepare(self, echo: Callable[[str], object] = print) -> None:
        """Queue what is unfinished and make sure every variant has its parent run."""
        self.tracker.experiment_id(self.spec.description, self.expanded.study_hash)
        with claim_lock(self.settings.storage.url):
            stale = {v.key: self.trials[v.key].stale_slots() for v in self.variants}
            for trials in self.trials.values():
                trials.fail_dead_trials()
                trials.reconcile(retry_failed=True)
        if any(stale.values()):
            echo(self._retrain_line(stale))
            for slots in stale.values():
                for facts in (trial_facts(t) for ts in slots.values() for t in ts):
                    if facts.mlflow_run_id:
                        self.tracker.mark_stale(facts.mlflow_run_id, f"trial key {facts.trial_key} is not current")
        self._unmark_current()
        for variant in self.variants:  # once per study run, here: the study file may have changed them
            self.tracker.sync_baselines(self.parent_run_id(variant), variant.baselines)

    def _unmark_current(self) -> None:
        """Children tagged stale whose trial counts again (the code went back to theirs)."""
        marked = set(self.tracker.stale_runs())
        if not marked:
            return
        current = {
            facts.mlflow_run_id
            for trials in self.trials.values()
            for facts in map(trial_facts, trials.current_trials())
            if facts.trial_key
        }
        for run_id in marked & current:
            self.tracker.unmark_stale(run_id)

    def _retrain_line(self, stale: dict[str, dict[str, list]]) -> str:
        """One line: how many trials are retrained, of which variants, and why (which
        code changed, when the stale trials recorded their code parts)."""
        count = sum(len(slots) for slots in stale.values())
        names = [v.name for v in self.variants if stale.get(v.key)]
        cause = stale_cause(
            (variant.config.code_fingerprint(), trial_facts(t))
            for variant in self.variants
            if stale.get(variant.key)
            for ts in stale[variant.key].values()
            for t in ts
        )
        trained = f"{count} trial{'s' if count != 1 else ''} {'were' if count != 1 else 'was'} trained"
        variants = f"(variant{'s' if len(names) != 1 else ''}: {', '.join(names)})"
        if not cause.code_changed:  # same code: the data or the platform version changed the key
            return f"trial keys changed since {trained} {variants}: data or platform version; retraining them"
        where = f" in {cause.where()}" if cause.files else ""
        return (
            f"code changed since {trained} {variants}: fingerprint {', '.join(sorted(cause.old))} -> "
            f"{', '.join(sorted(cause.new))}{where}; retraining them"
        )

    def finished_elsewhere(self, trial_key: str, optuna_study: str) -> TrialRecord | None:
        """A finished or diverged trial of `trial_key` in another Optuna study, or None."""
        if not self.settings.reuse:
            return None
        if self._finished is None:
            from cem_ablate.study.reuse import finished_trials

            self._finished = finished_trials(self.storage)
        original = self._finished.get(trial_key)
        if original is None and trial_key in self.shared_keys:  # finished by another study since the read
            from cem_ablate.study.reuse import finished_trials

            self._finished = finished_trials(self.storage)
            original = self._finished.get(trial_key)
        if original is None or original.study == optuna_study:
            return None
        return original

    # -- parent runs ---------------------------------------------------------------

    def _tracking_store(self) -> str:
        # One parent per tracking store: the same Optuna storage may be logged twice.
        return digest(self.settings.tracking_uri, chars=8)

    def _stored_parent(self, trials: VariantTrials) -> str | None:
        return study_facts(self.storage, trials.study_id).parent(self._tracking_store())

    def parent_run_id(self, variant: Variant) -> str:
        if variant.key in self._parents:
            return self._parents[variant.key]
        trials = self.trials[variant.key]
        run_id = self._stored_parent(trials)
        if not self.tracker.run_is_active(run_id):
            if run_id is None and not self._created[variant.key]:
                deadline = time.monotonic() + PARENT_WAIT_S  # its creator is making it now
                while run_id is None and time.monotonic() < deadline:
                    time.sleep(0.5)
                    run_id = self._stored_parent(trials)
            if not self.tracker.run_is_active(run_id):
                run_id = self.tracker.find_variant_run(variant.key) or self._create_parent(variant)
            record_study(self.storage, trials.study_id, parent=(self._tracking_store(), run_id))
        self._parents[variant.key] = run_id
        return run_id

    def _create_parent(self, variant: Variant) -> str:
        from cem_ablate.config.loading import flatten_dotted
        from cem_ablate.study.estimates import estimate
        from cem_ablate.tracking.study_runs import VariantRunInfo

        probe = variant.config
        params = flatten_dotted(probe.variant_mapping())
        params.update({k: v for k, v in variant.axis_values.items() if k not in params})
        params["lr_search.method"] = self.spec.lr_search.method
        info = VariantRunInfo(
            key=variant.key,
            name=variant.name,
            role=variant.role,
            labels=dict(variant.axis_values),
            baselines=dict(variant.baselines),
            params=params,
            metrics=estimate(probe).metrics(),
            study_yaml=yaml.safe_dump(self.expanded.mapping, sort_keys=False),
        )
        return self.tracker.create_variant_run(info)
