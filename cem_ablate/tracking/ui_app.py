"""The MLflow UI as `cem-ablate ui` serves it: MLflow's own server, the study's answer first.

MLflow 3.17.2's UI decides between its GenAI and model-training pages from the URL
(`?workflowType=`) or the browser's stored toggle, default GenAI; it does not consult
the experiment tag `mlflow.experimentKind` (a hard-coded feature flag in its bundled
JS, read 2026-11-23). Its runs table shows Source/Models/Dataset until a user adds
columns, every added column 100 px wide whatever its header; and on a local server its
assistant panel opens by itself on the first visit, taking a quarter of the width.

This module is MLflow's own server app with one change, made the way MLflow plugs in
apps (entry point group `mlflow.app`, name `cem-ablate`, started by
`mlflow server --app-name cem-ablate`): the index page gets a few lines of script that
run before the UI loads and, only where the browser has no value stored yet,
- set the page toggle to the model-training view;
- mark the assistant's first-visit opening as done (it stays one click away);
- give each cem-ablate study's runs table the answer's columns in reading order and
  each its width (`tracking.comparison_columns`: per baseline Δ, CI, Holm p and
  verdict, then objective* and lr*, then p), through the UI's own saved view (its
  `selectedColumns`, `columnOrder` and `columnWidths`), so that at 1600 px the
  answer for two baselines is on screen without scrolling.
The keys are MLflow's (`mlflow.workflowType_v1`, `mlflow.assistant.fab.autoOpenedOnFirstLoad_v1`,
`MLflowLocalStorage-1.1-ExperimentPage-["<id>"]-ReactComponentState`, read in its bundled
JS); a user's own toggle or column choice always wins.
"""

from __future__ import annotations

import json
import os

from flask import Response
from mlflow.server import app as flask_app
from mlflow.server.fastapi_app import app  # noqa: F401 - the ASGI app uvicorn serves (wraps flask_app)

from cem_ablate.tracking import tags as T
from cem_ablate.tracking.comparison_columns import view_columns, wide_value

WORKFLOW_KEY = "mlflow.workflowType_v1"
ASSISTANT_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"
VIEW_KEY = "MLflowLocalStorage-1.1-ExperimentPage-{ids}-ReactComponentState"
MAX_STUDIES = 200
RUN_NAME, DURATION = "attributes.`Run Name`", "duration"  # the runs table's own column ids (ag-grid colId)

# Column widths from the text they show, in px of the runs table's 13 px font: measured
# in headless Chromium 156 (tests/tracking/browser.py), a header averages 6.1 px per
# character, a number 5.3 and "unresolved" 5.9; the paddings hold the header's sort icon
# and the cell's margins. A column fits its header and the wider of the values logged
# so far and the usual widest value (`comparison_columns.wide_value`): the browser keeps
# the view it got on its first visit, maybe while the study's first trials train.
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


def study_views(store) -> dict[str, dict]:
    """Experiment id -> the runs-table view of its parent runs (cem-ablate studies only)."""
    from mlflow.entities import ViewType

    experiments = store.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=MAX_STUDIES)
    out = {}
    for experiment in (e for e in experiments if T.STUDY in e.tags):
        parents = store.search_runs([experiment.experiment_id], f"tags.`{T.KIND}` = 'variant'",
                                    ViewType.ACTIVE_ONLY, max_results=100)
        metrics = {k for r in parents for k in r.data.metrics}
        tag_keys = {k for r in parents for k in r.data.tags}
        baselines = sorted(k[len(T.VERDICT_PREFIX):] for k in tag_keys if k.startswith(T.VERDICT_PREFIX))
        columns = view_columns(baselines, metrics, tag_keys)
        if not columns:
            continue
        widths = {c: column_width(c, parents) for c in columns}
        widths[RUN_NAME] = _width([r.info.run_name or "" for r in parents] + ["Run Name"], HEADER_CHAR_PX,
                                  RUN_NAME_PAD_PX)
        out[experiment.experiment_id] = {"selectedColumns": columns, "columnOrder": [RUN_NAME, *columns, DURATION],
                                         "columnWidths": widths}
    return out


def startup_script(views: dict[str, dict]) -> str:
    views = {VIEW_KEY.format(ids=json.dumps([eid])).replace(" ", ""): json.dumps(view) for eid, view in views.items()}
    return ("<script>(function(){try{var s=window.localStorage;"
            f"if(s.getItem({json.dumps(WORKFLOW_KEY)})===null)"
            f"s.setItem({json.dumps(WORKFLOW_KEY)},{json.dumps(json.dumps('machine_learning'))});"
            f"if(s.getItem({json.dumps(ASSISTANT_OPENED_KEY)})===null)"
            f"s.setItem({json.dumps(ASSISTANT_OPENED_KEY)},'true');"
            f"var v={json.dumps(views)};"
            "for(var k in v){if(s.getItem(k)===null)s.setItem(k,v[k]);}"
            "}catch(e){}})();</script>")


def serve_index() -> Response:
    from mlflow.server.handlers import _get_tracking_store  # the store this server serves

    html = open(os.path.join(flask_app.static_folder, "index.html"), encoding="utf-8").read()
    try:
        views = study_views(_get_tracking_store())
    except Exception:  # noqa: BLE001 - a store hiccup must not take the UI down: no columns then
        views = {}
    return Response(html.replace("<head>", "<head>" + startup_script(views), 1), mimetype="text/html")


flask_app.view_functions["serve"] = serve_index
