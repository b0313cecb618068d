"""The MLflow UI as `cem-ablate ui` serves it: MLflow's own server, training view first.

MLflow 3.17.2's UI decides between its GenAI and model-training pages from the URL
(`?workflowType=`) or the browser's stored toggle, default GenAI; it does not consult
the experiment tag `mlflow.experimentKind` (a hard-coded feature flag in its bundled
JS, read 2026-11-23). Its runs table shows Source/Models/Dataset until a user adds
columns. So a study's plain experiment URL lands on an empty traces overview.

This module is MLflow's own server app with one change, made the way MLflow plugs in
apps (entry point group `mlflow.app`, name `cem-ablate`, started by
`mlflow server --app-name cem-ablate`): the index page gets a few lines of script that
run before the UI loads and, only where the browser has no choice stored yet,
- set the page toggle to the model-training view;
- give each cem-ablate study's runs table the answer's columns: Δ, its Holm p and the
  verdict vs each baseline, and objective* (visible at 1600 px), through the UI's own
  saved-view key.
The keys are MLflow's (`mlflow.workflowType_v1`, and
`MLflowLocalStorage-1.1-ExperimentPage-["<id>"]-ReactComponentState`); a user's own
toggle or column choice always wins.
"""

from __future__ import annotations

import json
import os

from flask import Response
from mlflow.server import app as flask_app
from mlflow.server.fastapi_app import app  # noqa: F401 - the ASGI app uvicorn serves (wraps flask_app)

from cem_ablate.tracking import tags as T

WORKFLOW_KEY = "mlflow.workflowType_v1"
VIEW_KEY = "MLflowLocalStorage-1.1-ExperimentPage-{ids}-ReactComponentState"
MAX_STUDIES = 200

# What the runs table shows first (names as study.summary logs them). MLflow 3.17's runs
# table orders columns by group (attributes, metrics, params, tags) and sorts metrics by
# name, so the verdict -- a tag -- comes after every chosen metric: only the answer's
# metrics are chosen, so that per baseline Δ, its Holm p and the verdict fit a 1600 px
# screen next to the variant's objective*. Every other aggregate (intervals, lr*,
# parameters, per-lr means) is one click away in the column selector.
VERDICT_METRICS = ("", "/p_holm")  # delta_vs_<baseline name> + suffix
LEADING_METRICS = ("objective_star",)
def study_columns(store) -> dict[str, list[str]]:
    """Experiment id -> the runs-table columns of its parent runs (cem-ablate studies only)."""
    from mlflow.entities import ViewType

    experiments = store.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=MAX_STUDIES)
    out = {}
    for experiment in (e for e in experiments if T.STUDY in e.tags):
        parents = store.search_runs([experiment.experiment_id], f"tags.`{T.KIND}` = 'variant'",
                                    ViewType.ACTIVE_ONLY, max_results=100)
        metrics = {k for r in parents for k in r.data.metrics}
        tag_keys = {k for r in parents for k in r.data.tags}
        baselines = sorted(k[len(T.VERDICT_PREFIX):] for k in tag_keys if k.startswith(T.VERDICT_PREFIX))
        columns = [f"metrics.`delta_vs_{name}{s}`" for name in baselines for s in VERDICT_METRICS
                   if f"delta_vs_{name}{s}" in metrics]
        columns += [f"metrics.`{m}`" for m in LEADING_METRICS if m in metrics]
        columns += [f"tags.`{T.VERDICT_PREFIX}{name}`" for name in baselines]
        if columns:
            out[experiment.experiment_id] = columns
    return out


def startup_script(columns: dict[str, list[str]]) -> str:
    views = {VIEW_KEY.format(ids=json.dumps([eid])).replace(" ", ""): json.dumps({"selectedColumns": cols})
             for eid, cols in columns.items()}
    return ("<script>(function(){try{var s=window.localStorage;"
            f"if(s.getItem({json.dumps(WORKFLOW_KEY)})===null)"
            f"s.setItem({json.dumps(WORKFLOW_KEY)},{json.dumps(json.dumps('machine_learning'))});"
            f"var v={json.dumps(views)};"
            "for(var k in v){if(s.getItem(k)===null)s.setItem(k,v[k]);}"
            "}catch(e){}})();</script>")


def serve_index() -> Response:
    from mlflow.server.handlers import _get_tracking_store  # the store this server serves

    html = open(os.path.join(flask_app.static_folder, "index.html"), encoding="utf-8").read()
    try:
        columns = study_columns(_get_tracking_store())
    except Exception:  # noqa: BLE001 - a store hiccup must not take the UI down: no columns then
        columns = {}
    return Response(html.replace("<head>", "<head>" + startup_script(columns), 1), mimetype="text/html")


flask_app.view_functions["serve"] = serve_index
