"""Writing a study to MLflow: experiment, parent run per variant, child run per trial.

Layout (what the UI shows, and what `readback` reads):

    experiment <study name>             tags: study hash, note = description,
      |                                 mlflow.experimentKind (the training view)
      run <variant name>                parent: kind=variant, variant key, every axis
        |                               value as tag and param, the whole resolved
        |                               config as params, parameter counts, FLOPs,
        |                               lr_akima, ppl_akima, akima.png, study.yaml,
        |                               seed aggregates and verdicts (stats.json)
        +- run lr=0.002 seed=0          child (mlflow.parentRunId): kind=trial,
                                        trial key, status, curves from the engine

Runs are found by tag before they are created, so reruns and extra workers reuse
them: a parent is created once per variant (the caller serializes that through the
Optuna storage), a child once per trial key (only the worker holding the trial's
claim creates it; a retried trial reuses the child of the killed attempt).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.run_context import source_tags
from cem_ablate.tracking.store import default_artifact_root, make_client

MAX_PARAM_CHARS = 6000
BATCH = 100  # MLflow's limit of params per log_batch call
STATS_ARTIFACT = "stats.json"  # the variant's seed statistics and verdicts (study.summary), likewise


@dataclass
class VariantRunInfo:
    key: str
    name: str
    role: str
    labels: dict[str, str]  # axis label -> value ("variant": "llama", "model.size": "86M")
    baselines: dict[str, str]  # baseline name -> variant key
    params: dict[str, Any]  # the resolved run config, flattened to dotted keys
    metrics: dict[str, float] = field(default_factory=dict)  # parameter counts, FLOPs, budget
    study_yaml: str = ""


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text[:MAX_PARAM_CHARS]


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


class StudyTracker:
    def __init__(self, tracking_uri: str, experiment_name: str):
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.client = make_client(tracking_uri)
        self._experiment_id: str | None = None

    # -- experiment --------------------------------------------------------------------

    def experiment_id(self, description: str = "", study_hash: str = "") -> str:
        """Find or create the study's experiment (a concurrent creator wins the race)."""
        if self._experiment_id is not None:
            return self._experiment_id
        from mlflow.exceptions import MlflowException

        experiment = self.client.get_experiment_by_name(self.experiment_name)
        if experiment is None:
            tags = {
                T.STUDY: self.experiment_name,
                T.NOTE: description or self.experiment_name,
                T.EXPERIMENT_KIND: T.TRAINING_KIND,
            }
            root = default_artifact_root(self.tracking_uri)
            location = (root / "artifacts" / self.experiment_name).as_uri() if root is not None else None
            try:
                self._experiment_id = self.client.create_experiment(self.experiment_name, location, tags)
            except MlflowException:  # created meanwhile by another worker or machine
                experiment = self.client.get_experiment_by_name(self.experiment_name)
                if experiment is None:
                    raise
        if experiment is not None:
            if experiment.lifecycle_stage == "deleted":
                self.client.restore_experiment(experiment.experiment_id)
            self._experiment_id = experiment.experiment_id
            if T.EXPERIMENT_KIND not in experiment.tags:  # a store written before the tag existed
                self.client.set_experiment_tag(self._experiment_id, T.EXPERIMENT_KIND, T.TRAINING_KIND)
        if study_hash and (experiment is None or experiment.tags.get(T.STUDY_HASH) != study_hash):
            try:
                self.client.set_experiment_tag(self._experiment_id, T.STUDY_HASH, study_hash)
            except MlflowException:  # two machines set it at once: a server on PostgreSQL refuses the second
                if self.client.get_experiment(self._experiment_id).tags.get(T.STUDY_HASH) != study_hash:
                    raise
        assert self._experiment_id is not None  # created above, or the found experiment's
        return self._experiment_id

    def _search(self, filter_string: str) -> list:
        return list(
            self.client.search_runs(
                [self.experiment_id()],
                filter_string=filter_string,
                order_by=["attributes.start_time ASC"],
                max_results=1000,
            )
        )

    def run_is_active(self, run_id: str | None) -> TypeGuard[str]:
        if not run_id:
            return False
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return False
        return run.info.lifecycle_stage == "active" and run.info.experiment_id == self.experiment_id()

    # -- parent run per variant ------------------------------------------------------------

    def find_variant_run(self, variant_key: str) -> str | None:
        runs = self._search(f"tags.`{T.KIND}` = 'variant' and tags.`{T.VARIANT_KEY}` = {_quote(variant_key)}")
        return runs[0].info.run_id if runs else None

    def create_variant_run(self, info: VariantRunInfo) -> str:
        from mlflow.entities import Metric, Param

        tags = {
            T.STUDY: self.experiment_name,
            T.KIND: "variant",
            T.VARIANT_KEY: info.key,
            T.VARIANT: info.name,
            T.ROLE: info.role,
            T.AXES: json.dumps(sorted(info.labels)),
            T.PROGRESS: "running",
        } | source_tags()
        tags.update({f"{T.BASELINE_PREFIX}{name}": key for name, key in info.baselines.items()})
        tags.update({label: _text(value) for label, value in info.labels.items()})
        run = self.client.create_run(self.experiment_id(), tags=tags, run_name=info.name)
        run_id = run.info.run_id
        params = {k: _text(v) for k, v in info.params.items()} | {k: _text(v) for k, v in info.labels.items()}
        items = [Param(k, v) for k, v in sorted(params.items())]
        for i in range(0, len(items), BATCH):
            self.client.log_batch(run_id, params=items[i : i + BATCH])
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, 0) for k, v in info.metrics.items() if v is not None]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)
        if info.study_yaml:
            self.client.log_text(run_id, info.study_yaml, "study.yaml")
        return run_id

    def sync_baselines(self, run_id: str, baselines: Mapping[str, str]) -> None:
        """Point an existing parent's baseline tags at the study file's baselines: a
        rerun after a baseline was added (or dropped) must compare against it, and the
        report reads the comparisons to show from these tags."""
        current = T.baselines_of(self.client.get_run(run_id).data.tags)
        for name in current.keys() - baselines.keys():
            self.client.delete_tag(run_id, f"{T.BASELINE_PREFIX}{name}")
        for name, key in baselines.items():
            if current.get(name) != key:
                self.client.set_tag(run_id, f"{T.BASELINE_PREFIX}{name}", key)

    def log_variant_summary(
        self,
        run_id: str,
        metrics: Mapping[str, float | None],
        tags: Mapping[str, str],
        plot_path: str | None,
        done: bool,
        step: int = 0,
        stats: Mapping[str, Any] | None = None,
    ) -> None:
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        batch = [
            Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None and math.isfinite(float(v))
        ]
        self.client.log_batch(run_id, metrics=batch, tags=[RunTag(k, _text(v)) for k, v in tags.items()])
        if plot_path:
            self.client.log_artifact(run_id, plot_path)
        if stats is not None:
            self.client.log_text(run_id, json.dumps(stats), STATS_ARTIFACT)
        if done:
            self.client.set_terminated(run_id, "FINISHED")

    # -- child run per trial -------------------------------------------------------------------

    def ensure_trial_run(self, parent_id: str, trial_key: str, name: str, tags: Mapping[str, str]) -> str:
        """The child run of a trial: reused if a killed attempt already made it."""
        runs = self._search(f"tags.`{T.TRIAL_KEY}` = {_quote(trial_key)} and tags.`{T.PARENT}` = {_quote(parent_id)}")
        if runs:
            run_id = runs[0].info.run_id
            self.client.update_run(run_id, status="RUNNING")
            return run_id
        # No status tag yet: a child without one is running (readback), and the outcome
        # writer (tracking.outcome) is the only place that sets it.
        all_tags = (
            {T.STUDY: self.experiment_name, T.KIND: "trial", T.TRIAL_KEY: trial_key, T.PARENT: parent_id}
            | source_tags()
            | dict(tags)
        )
        return self.client.create_run(self.experiment_id(), tags=all_tags, run_name=name).info.run_id

    def log_trial_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """The trial's resolved config as params (those the run does not hold yet:
        a retried trial logs into the child of its killed attempt)."""
        from mlflow.entities import Param

        existing = self.client.get_run(run_id).data.params
        items = [Param(k, _text(v)) for k, v in sorted(params.items()) if k not in existing]
        for i in range(0, len(items), BATCH):
            self.client.log_batch(run_id, params=items[i : i + BATCH])

    def log_trial_outcome(
        self,
        run_id: str,
        status: TrialStatus,
        reason: str,
        metrics: Mapping[str, float | None],
        step: int = 0,
        cause: Cause | None = None,
    ) -> None:
        from cem_ablate.tracking.outcome import record_outcome

        record_outcome(self.client, run_id, status, reason, metrics, step, cause)

    def record_reused_trial(
        self,
        run_id: str,
        original_run_id: str | None,
        status: TrialStatus,
        reason: str,
        metrics: Mapping[str, float | None],
    ) -> None:
        """A trial answered by another study's run: link it and carry its final metrics."""
        from mlflow.exceptions import MlflowException

        from cem_ablate.tracking.outcome import record_outcome

        final = dict(metrics)
        if original_run_id:
            self.client.set_tag(run_id, T.REUSED_FROM, original_run_id)
            try:  # the original's store may be another one: then only the objective travels
                final = dict(self.client.get_run(original_run_id).data.metrics) | final
            except MlflowException:
                pass
        record_outcome(self.client, run_id, status, reason, final)

    def log_trial_code(self, run_id: str, fingerprint: str, parts: Mapping[str, str]) -> None:
        """The code fingerprint of a trial: a tag, and its per-file digests as an artifact."""
        self.client.set_tag(run_id, T.CODE_FINGERPRINT, fingerprint)
        self.client.log_text(
            run_id,
            json.dumps({"fingerprint": fingerprint, "parts": dict(parts)}, indent=1, sort_keys=True),
            T.CODE_ARTIFACT,
        )

    def mark_stale(self, run_id: str, reason: str) -> None:
        """A child whose trial is retrained under new code: kept for history, left out of reports."""
        self.client.set_tag(run_id, T.STALE, reason)

    def stale_runs(self) -> list[str]:
        """The run ids of this experiment's children tagged stale."""
        return [r.info.run_id for r in self._search(f"tags.`{T.STALE}` LIKE '%'")]

    def unmark_stale(self, run_id: str) -> None:
        """A stale child whose trial key is current again (the code went back)."""
        self.client.delete_tag(run_id, T.STALE)

    def mark_killed(self, run_id: str) -> None:
        """An interrupted trial: ended, with no status (it is retried, not finished)."""
        self.client.set_terminated(run_id, "KILLED")
