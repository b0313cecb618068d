"""Downstream-task metrics (`cem-ablate eval`, a study's `eval:`) onto an existing run.

The run is the trial's MLflow child (its id is in the run folder's `mlflow.json`);
metrics are named `eval/<task>/<metric>` (cem_ablate/evaluation/harness.py), logged
once per evaluation at step 0 so a rerun overwrites nothing but adds the same values.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from cem_ablate.tracking.store import make_client

EVAL_PREFIX = "eval/"


def log_eval_metrics(tracking_uri: str, run_id: str, metrics: Mapping[str, float]) -> None:
    from mlflow.entities import Metric

    client = make_client(tracking_uri)
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(key, float(value), now, 0) for key, value in sorted(metrics.items())])
