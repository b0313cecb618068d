"""The one writer of a run's outcome in MLflow: final metrics, status, reason, end.

Both kinds of run end here: a study's trial (child run, written by the study after
the engine returns) and a standalone `cem-ablate train` run (written by the engine,
which owns that run). A run's status is written nowhere else, so a trial can never
be recorded twice with two different outcomes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.tracking import tags as T

MAX_REASON_CHARS = 5000


def record_outcome(
    client,
    run_id: str,
    status: TrialStatus,
    reason: str | None,
    metrics: Mapping[str, float | None],
    step: int = 0,
    cause: Cause | None = None,
) -> None:
    """Log the finite `metrics` at `step`, tag status (its stored string), reason and cause and end
    the run (FAILED for `failed`, FINISHED otherwise: diverged and pruned are results).
    A metric the run's curves already hold at `step` (the engine logged the final test
    and validation there) is not logged twice."""
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
    held = _held_at(client, run_id, finite.keys(), step)
    batch = [Metric(k, v, now, step) for k, v in finite.items() if k not in held]
    status = TrialStatus(status)
    tags = [RunTag(T.STATUS, status.value)] + ([RunTag(T.REASON, reason[:MAX_REASON_CHARS])] if reason else [])
    tags += [RunTag(T.CAUSE, Cause(cause).value)] if cause is not None else []
    client.log_batch(run_id, metrics=batch, tags=tags)
    client.set_terminated(run_id, "FAILED" if status == TrialStatus.FAILED else "FINISHED")


def _held_at(client, run_id: str, keys, step: int) -> set[str]:
    """Those of `keys` the run already has a point of at `step`."""
    logged = client.get_run(run_id).data.metrics.keys() & set(keys)
    return {k for k in logged if any(m.step == step for m in client.get_metric_history(run_id, k))}
