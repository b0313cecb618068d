"""The runs table a study opens on: the answer's columns, in reading order, each sized.

`tracking.comparison_columns` names the parent runs' display columns; this makes them
MLflow 3.17's runs-table view state (`selectedColumns`, `columnOrder`, `columnWidths`,
column ids as its ag-grid uses them, read in its bundled JS), for two uses:
- `tracking.ui_app` writes it into a fresh browser's saved view, so the study's plain
  URL served by `cem-ablate ui` opens on it;
- `share_views` stores it as the experiment's shared view, MLflow's own "Share" of a
  view: the experiment tag `mlflow.sharedViewState.<key>` (plain JSON is accepted), opened
  by `#/experiments/<id>/runs?viewStateShareKey=<key>` on any MLflow server of the store,
  a plain `mlflow server` or a cluster's tracking server included (`shared_view_url`).
  `cem-ablate report` (and the end of `cem-ablate study`) and `cem-ablate ui` write it.
"""

from __future__ import annotations

import json

from cem_ablate.tracking import tags as T
from cem_ablate.tracking.comparison_columns import view_columns, wide_value

SHARE_KEY = "cem-ablate"
SHARED_VIEW_TAG = "mlflow.sharedViewState." + SHARE_KEY  # MLflow's prefix for a shared view
MAX_STUDIES = 200
RUN_NAME, DURATION = "attributes.`Run Name`", "duration"  # the runs table's own column ids (ag-grid colId)

# Column widths from the text they show, in px of the runs table's 13 px font: measured
# in headless Chromium 156 (tests/tracking/browser.py), a header averages 6.1 px per
# character, a number 5.3 and "unresolved" 5.9; the paddings hold the header's sort icon
# and the cell's margins. A column fits its header and the wider of the values logged
# so far and the usual widest value (`comparison_columns.wide_value`): the browser keeps
# the view it got on its first visit, maybe while the study's first trials train.
# These are Arial's metrics (Liberation Sans on Linux; the UI's font stack asks for
# Helvetica/Arial). A Linux box whose only fonts are DejaVu draws the headers wider
# (7.9 px per character): four answer headers are then cut at 1600 px,
# and widths for DejaVu would not fit the answer columns in 1600 px at all.
HEADER_CHAR_PX = 6.5
VALUE_CHAR_PX = 5.7
HEADER_PAD_PX = 28
CELL_PAD_PX = 24
MIN_WIDTH_PX = 60
RUN_NAME_PAD_PX = 60  # expander, colour dot and padding beside the name


def _width(texts, char_px: float, pad: int) -> int:
    return max(MIN_WIDTH_PX, round(max(len(t) for t in texts) * char_px) + pad)


def _value_text(run, column: str) -> str:
    group, key = column.split(".", 1)
    key = key.strip("`")
    value = (run.data.metrics if group == "metrics" else run.data.tags).get(key)
    return "" if value is None else value if isinstance(value, str) else f"{value:g}"


def column_width(column: str, runs) -> int:
    header = _width([column.split(".", 1)[1].strip("`")], HEADER_CHAR_PX, HEADER_PAD_PX)
    values = _width([wide_value(column)] + [_value_text(r, column) for r in runs], VALUE_CHAR_PX, CELL_PAD_PX)
    return max(header, values)


def study_views(store, study: str | None = None) -> dict[str, dict]:
    """Experiment id -> the runs-table view of its parent runs (cem-ablate studies with
    display columns only; `study`: that one). `store`: a tracking store or an
    `MlflowClient` (the same search calls)."""
    from mlflow.entities import ViewType

    experiments = store.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=MAX_STUDIES)
    out = {}
    for experiment in (e for e in experiments if T.STUDY in e.tags and study in (None, e.name)):
        parents = store.search_runs(
            [experiment.experiment_id], f"tags.`{T.KIND}` = 'variant'", ViewType.ACTIVE_ONLY, max_results=100
        )
        metrics = {k for r in parents for k in r.data.metrics}
        tag_keys = {k for r in parents for k in r.data.tags}
        baselines = sorted(k[len(T.VERDICT_PREFIX) :] for k in tag_keys if k.startswith(T.VERDICT_PREFIX))
        columns = view_columns(baselines, metrics, tag_keys)
        if not columns:
            continue
        widths = {c: column_width(c, parents) for c in columns}
        widths[RUN_NAME] = _width(
            [r.info.run_name or "" for r in parents] + ["Run Name"], HEADER_CHAR_PX, RUN_NAME_PAD_PX
        )
        out[experiment.experiment_id] = {
            "selectedColumns": columns,
            "columnOrder": [RUN_NAME, *columns, DURATION],
            "columnWidths": widths,
        }
    return out


def share_views(tracking_uri: str, study: str | None = None) -> dict[str, str]:
    """Store each study's view as its experiment's shared view (the tag is rewritten only
    when the view changed); experiment id -> its share key."""
    from cem_ablate.tracking.store import make_client

    client = make_client(tracking_uri)
    out = {}
    for eid, view in study_views(client, study).items():
        value = json.dumps(view)
        if client.get_experiment(eid).tags.get(SHARED_VIEW_TAG) != value:
            client.set_experiment_tag(eid, SHARED_VIEW_TAG, value)
        out[eid] = SHARE_KEY
    return out


def shared_view_url(server_url: str, experiment_id: str) -> str:
    """The study's runs table on its shared view, in MLflow's model-training page."""
    return (
        f"{server_url}/#/experiments/{experiment_id}/runs?viewStateShareKey={SHARE_KEY}&workflowType=machine_learning"
    )
