"""The MLflow UI as `cem-ablate ui` serves it: MLflow's own server, the study's answer first.

MLflow 3.17.2's UI decides between its GenAI and model-training pages from the URL
(`?workflowType=`) or the browser's stored toggle, default GenAI; it does not consult
the experiment tag `mlflow.experimentKind` (a hard-coded feature flag in its bundled
JS). Its runs table shows Source/Models/Dataset until a user adds
columns, every added column 100 px wide whatever its header; and on a local server its
assistant panel opens by itself on the first visit, taking a quarter of the width.

This module is MLflow's own server app with one change, made the way MLflow plugs in
apps (entry point group `mlflow.app`, name `cem-ablate`, started by
`mlflow server --app-name cem-ablate`): the index page gets a few lines of script that
run before the UI loads and, only where the browser has no value stored yet,
- set the page toggle to the model-training view;
- mark the assistant's first-visit opening as done (it stays one click away);
- give each cem-ablate study's runs table the answer's columns in reading order and
  each its width (`tracking.runs_table_view`: per baseline Δ, CI, Holm p and
  verdict, then objective* and lr*, then p), through the UI's own saved view (its
  `selectedColumns`, `columnOrder` and `columnWidths`), so that at 1600 px the
  answer for two baselines is on screen without scrolling.
(On a plain `mlflow server` the same columns open from the study's shared-view link,
`runs_table_view.shared_view_url`.)
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

from cem_ablate.tracking.runs_table_view import study_views

WORKFLOW_KEY = "mlflow.workflowType_v1"
ASSISTANT_OPENED_KEY = "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1"
VIEW_KEY = "MLflowLocalStorage-1.1-ExperimentPage-{ids}-ReactComponentState"


def startup_script(views: dict[str, dict]) -> str:
    stored = {VIEW_KEY.format(ids=json.dumps([eid])).replace(" ", ""): json.dumps(view) for eid, view in views.items()}
    return (
        "<script>(function(){try{var s=window.localStorage;"
        f"if(s.getItem({json.dumps(WORKFLOW_KEY)})===null)"
        f"s.setItem({json.dumps(WORKFLOW_KEY)},{json.dumps(json.dumps('machine_learning'))});"
        f"if(s.getItem({json.dumps(ASSISTANT_OPENED_KEY)})===null)"
        f"s.setItem({json.dumps(ASSISTANT_OPENED_KEY)},'true');"
        f"var v={json.dumps(stored)};"
        "for(var k in v){if(s.getItem(k)===null)s.setItem(k,v[k]);}"
        "}catch(e){}})();</script>"
    )


def serve_index() -> Response:
    from mlflow.server.handlers import _get_tracking_store  # the store this server serves

    assert flask_app.static_folder is not None  # MLflow's app serves its UI from its static folder
    html = open(os.path.join(flask_app.static_folder, "index.html"), encoding="utf-8").read()
    try:
        views = study_views(_get_tracking_store())
    except Exception:  # noqa: BLE001 - a store hiccup must not take the UI down: no columns then
        views = {}
    return Response(html.replace("<head>", "<head>" + startup_script(views), 1), mimetype="text/html")


flask_app.view_functions["serve"] = serve_index
