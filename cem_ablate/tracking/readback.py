"""Reading studies back from MLflow (for `cem-ablate report` and `ui`): parents and children.

A child run is read into the platform's one trial record (`config.trial_record.TrialRecord`),
its status tag through `TrialStatus.read` (a child without one is running).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.store import make_client
from cem_ablate.tracking.study_runs import STATS_ARTIFACT


@dataclass
class VariantRecord:
    run_id: str
    key: str
    name: str
    role: str
    status: str
    labels: dict[str, str]
    baselines: dict[str, str]  # baseline name -> variant key
    metrics: dict[str, float]
    edge: str | None
    start_time: int = 0
    trials: list[TrialRecord] = field(default_factory=list)
    stats: dict | None = None  # its seed statistics and verdicts (stats.json), as logged

    @property
    def params_total(self) -> int | None:
        value = self.metrics.get("params_total")
        return int(value) if value is not None else None

    @property
    def lr_star(self) -> float | None:
        return self.metrics.get("lr_akima")

    @property
    def ppl_star(self) -> float | None:
        return self.metrics.get("ppl_akima")


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def read_study(tracking_uri: str, experiment_name: str, variant_keys: list[str] | None = None) -> list[VariantRecord]:
    """Parents (one per variant; the newest per name unless keys are given) and children.

    Raises LookupError when the store has no such experiment.
    """
    client = make_client(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None or experiment.lifecycle_stage != "active":
        raise LookupError(experiment_name)
    runs = []
    page = None
    while True:
        batch = client.search_runs(
            [experiment.experiment_id],
            page_token=page,
            max_results=1000,
            filter_string=f"tags.`{T.STUDY}` = '{experiment_name}'",
        )
        runs.extend(batch)
        page = batch.token
        if not page:
            break
    parents = [r for r in runs if r.data.tags.get(T.KIND) == "variant"]
    # A stale child was trained by other code and retrained since (study/trials.py): history only.
    children = [r for r in runs if r.data.tags.get(T.KIND) == "trial" and T.STALE not in r.data.tags]
    if variant_keys is not None:
        wanted = set(variant_keys)
        parents = [r for r in parents if r.data.tags.get(T.VARIANT_KEY) in wanted]
    else:  # the latest config of each variant name
        newest: dict[str, object] = {}
        for r in sorted(parents, key=lambda r: r.info.start_time):
            newest[r.data.tags.get(T.VARIANT, r.info.run_name)] = r
        parents = list(newest.values())

    by_parent: dict[str, list[TrialRecord]] = {}
    for r in children:
        tags = r.data.tags
        seed = _float(tags.get("seed"))
        status = TrialStatus.read(tags.get(T.STATUS), default=TrialStatus.RUNNING)
        by_parent.setdefault(tags.get(T.PARENT, ""), []).append(
            TrialRecord(
                lr=_float(tags.get("lr")),
                seed=int(seed) if seed is not None else None,
                status=status,
                # GP / MQAR trials have no perplexity: their objective (RMSE, recall error) stands in.
                value=(
                    r.data.metrics.get("test_ppl", r.data.metrics.get("objective"))
                    if status == TrialStatus.FINISHED
                    else None
                ),
                reason=tags.get(T.REASON, ""),
                cause=Cause.read(tags.get(T.CAUSE)),
                variant=tags.get(T.VARIANT, ""),
                slot=tags.get(T.SLOT, ""),
                trial_key=tags.get(T.TRIAL_KEY, ""),
                run_id=r.info.run_id,
            )
        )

    out = []
    for r in parents:
        tags = r.data.tags
        labels = {k: tags[k] for k in json.loads(tags.get(T.AXES, "[]")) if k in tags}
        baselines = T.baselines_of(tags)
        edge = tags.get(T.AKIMA_EDGE)
        out.append(
            VariantRecord(
                run_id=r.info.run_id,
                key=tags.get(T.VARIANT_KEY, ""),
                name=tags.get(T.VARIANT, r.info.run_name),
                role=tags.get(T.ROLE, "variant"),
                status=tags.get(T.PROGRESS, ""),
                labels=labels,
                baselines=baselines,
                metrics=dict(r.data.metrics),
                edge=None if edge in (None, "none") else edge,
                start_time=r.info.start_time or 0,
                trials=sorted(by_parent.get(r.info.run_id, []), key=lambda t: (t.lr or 0.0, t.seed or 0)),
                stats=_read_json(client, r.info.run_id, STATS_ARTIFACT),
            )
        )
    return out


def study_experiments(uri: str) -> list[tuple[str, str]]:
    """(study name, experiment id) of every cem-ablate study in the store, oldest first
    (`cem-ablate ui` prints their URLs)."""
    from mlflow.entities import ViewType

    experiments = make_client(uri).search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=1000)
    studies = [e for e in experiments if T.STUDY in e.tags]
    return [(e.name, e.experiment_id) for e in sorted(studies, key=lambda e: e.creation_time or 0)]


def _read_json(client, run_id: str, artifact: str) -> dict | None:
    import tempfile

    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, artifact, tmp)
        except (MlflowException, OSError):  # not logged yet (no trial finished)
            return None
        with open(path) as f:
            return json.load(f)


def read_run_metrics(tracking_uri: str, run_ids: list[str], prefix: str = "") -> dict[str, dict[str, float]]:
    """run id -> its latest logged metrics whose names start with `prefix` (e.g. the energy
    trace `energy/<sublayer>/step<t>` of a trial's final validation; the width report)."""
    if not run_ids:
        return {}
    client = make_client(tracking_uri)
    return {
        run_id: {k: float(v) for k, v in client.get_run(run_id).data.metrics.items() if k.startswith(prefix)}
        for run_id in run_ids
    }
