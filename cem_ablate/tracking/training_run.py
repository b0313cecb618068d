"""MLflow for one training run, through Lightning's MLFlowLogger (rank 0 only).

The run is either handed in (`mlflow_run_id`: the study's child run) or created in
`experiment` and remembered in the run folder, so a resumed run continues the same
MLflow run instead of opening a second one. The default store is
`sqlite:///<cwd>/mlruns/mlflow.db` with artifacts under `mlruns/` (NOTES: the plain
`./mlruns` file store is refused by MLflow 3, and MLFlowLogger would fall back to it
unless given a URI). Configuration and data facts are logged as params (dotted keys),
the outcome as tags `cem_ablate.status` / `cem_ablate.reason` plus summary metrics.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.credentials import with_password
from cem_ablate.tracking.run_context import source_tags
from cem_ablate.tracking.store import make_client, quiet_mlflow


def open_logger(
    tracking_uri: str, experiment: str, run_name: str, run_id: str | None, guard: Callable[[], None] | None = None
):
    """An MLFlowLogger on an existing run (`run_id`) or a new one in `experiment`.

    `guard` is called before every write (it raises when this process lost its claim on
    the run, `training.lease`): a fenced worker adds no point to the curves, and Lightning's
    `finalize` after that error writes nothing either. A metric is logged only past the
    last step it already has, so every (metric, step) is recorded once: a resumed attempt
    replays the steps between its checkpoint and the kill with the same values (exact
    resume), and Lightning adds `epoch` to every dict it logs (the training step's and
    the validation's at the same step)."""
    quiet_mlflow()
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    guard = guard or (lambda: None)
    guard()
    artifact_location = None
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///") :])
        make_client(tracking_uri)  # the store's file and schema, made once under its lock (tracking.store)
        artifact_location = (db.parent / "artifacts" / experiment).as_uri()
    logger = _guarded_logger_class()(
        experiment_name=experiment,
        run_name=run_name,
        tracking_uri=with_password(tracking_uri),  # in memory only; the run folder records `tracking_uri`
        run_id=run_id,
        artifact_location=artifact_location,
        tags=None if run_id else {T.KIND: "train"} | source_tags(),  # git commit: see tracking.run_context
    )
    logger.guard = guard
    if run_id:  # a resumed or handed-in run may have been marked finished/killed
        logger.logged_through = _last_steps(logger.experiment, run_id)
        logger.experiment.update_run(run_id, status="RUNNING")
    else:  # a standalone run's experiment opens in the UI's training view (tags.EXPERIMENT_KIND)
        logger.experiment.set_experiment_tag(logger.experiment_id, T.EXPERIMENT_KIND, T.TRAINING_KIND)
    return logger


@functools.cache
def _guarded_logger_class() -> type:
    from lightning.pytorch.loggers import MLFlowLogger

    class GuardedMLFlowLogger(MLFlowLogger):
        logged_through: Mapping[str, int] = {}
        guard: Callable[[], None]  # set on each instance: raises once the trial's claim is lost

        def log_metrics(self, metrics, step=None):
            self.guard()
            if step is not None:
                metrics = {k: v for k, v in metrics.items() if step > self.logged_through.get(k, -1)}
                if not metrics:
                    return
            super().log_metrics(metrics, step)
            if step is not None:
                self.logged_through = dict(self.logged_through) | dict.fromkeys(metrics, step)

        def log_hyperparams(self, params):
            self.guard()
            super().log_hyperparams(params)

        def finalize(self, status: str = "success") -> None:
            try:
                self.guard()
            except Exception:  # noqa: BLE001 - fenced: the run's status is the live claim's to write
                return
            super().finalize(status)

    return GuardedMLFlowLogger


def _last_steps(client, run_id: str) -> dict[str, int]:
    """metric -> the last step the run holds of it."""
    out = {}
    for key in client.get_run(run_id).data.metrics:
        history = client.get_metric_history(run_id, key)
        if history:
            out[key] = max(m.step for m in history)
    return out


def log_params(logger, params: Mapping[str, Any]) -> None:
    """Log the params the run does not hold yet.

    A resumed run holds them already, and a handed-in run may carry the study's own
    params under the same keys: MLflow refuses to change a param's value.
    """
    from mlflow.entities import Param
    from mlflow.exceptions import MlflowException

    client, run_id = logger.experiment, logger.run_id
    existing = client.get_run(run_id).data.params
    batch = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
    for i in range(0, len(batch), 100):
        try:
            client.log_batch(run_id, params=batch[i : i + 100])
        except MlflowException as err:  # pragma: no cover - raced by another writer
            warnings.warn(f"MLflow params not logged: {err}", stacklevel=2)


def log_outcome(
    logger,
    status: TrialStatus,
    reason: str | None,
    metrics: Mapping[str, float | None],
    step: int,
    cause: Cause | None = None,
) -> None:
    """The outcome of a run the engine opened itself (`cem-ablate train`)."""
    from cem_ablate.tracking.outcome import record_outcome

    record_outcome(logger.experiment, logger.run_id, status, reason, metrics, step, cause)


def log_config_text(logger, text: str) -> None:
    logger.experiment.log_text(logger.run_id, text, "config.yaml")


def mark_killed(logger) -> None:
    """A run stopped before its end (preempted): KILLED, resumed by the same command."""
    logger.experiment.set_terminated(logger.run_id, "KILLED")
