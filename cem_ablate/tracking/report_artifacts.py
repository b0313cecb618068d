"""A study's report on its parent runs: the run page shows the answer and its figures.

`cem-ablate report` (and the end of `cem-ablate study`) writes `report.md` and its
figures into a folder; this copies that folder to `report/` of every variant's parent
run, so the MLflow UI's run page (Artifacts) opens report.md and the figures beside the
run's own `akima.png` and `stats.json`. A later report replaces the files of the same
name.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cem_ablate.tracking.store import make_client

REPORT_ARTIFACTS = "report"


def log_report(tracking_uri: str, run_ids: Iterable[str], folder: Path) -> None:
    client = make_client(tracking_uri)
    for run_id in run_ids:
        client.log_artifacts(run_id, str(folder), REPORT_ARTIFACTS)
