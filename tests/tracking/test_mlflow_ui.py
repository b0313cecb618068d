"""The MLflow UI (3.17) on a study's store, rendered by headless Chromium.

What the UI does with our runs, checked in its DOM: the experiment carries
`mlflow.experimentKind = custom_model_development`, and its runs table lists the
variants' parent runs. Two limits of MLflow 3.17.2's UI, read in its bundled JS
(mlflow/server/js/build): the page kind comes from the `workflowType` URL parameter or
the browser's stored GenAI/Model-training toggle (default GenAI; the experiment tag is
not consulted: its feature flag is hard-coded), and the runs table shows only the
Source/Models/Dataset columns until a user adds metric columns. A plain `mlflow
server` therefore needs `?workflowType=machine_learning`; the server `cem-ablate ui`
starts (tracking.ui_app) opens the plain experiment URL on the runs table with the
aggregate columns, which the second test checks.
"""

import shutil
import socket
import subprocess

import pytest

from cem_ablate.tracking import tags as T
from cem_ablate.tracking.server import TrackingServer
from cem_ablate.tracking.study_runs import StudyTracker, VariantRunInfo

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dom(url: str, profile, width: int = 1600) -> str:
    """The rendered page; the runs table renders only the columns in view: `width`."""
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
         f"--window-size={width},1000", "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120).stdout


def rendered_experiment(uri: str, experiment: str, tmp_path, profile: str, query: str = "", width: int = 1600,
                        app_name: str | None = None) -> str:
    """The experiment's page as a fresh browser profile sees it, from a server on `uri`."""
    with TrackingServer(uri, "127.0.0.1", free_port(), str(tmp_path / "artifacts"), app_name=app_name) as server:
        assert server.wait_ready()
        return dom(f"{server.url}/#/experiments/{experiment}{query}", tmp_path / profile, width=width)


def add_parent(tracker: StudyTracker, name: str, metrics: dict, tags: dict) -> str:
    """A variant's parent run carrying the aggregates `study.summary` logs."""
    run = tracker.create_variant_run(VariantRunInfo(name, name, "variant", {"variant": name}, {}, {}))
    tracker.log_variant_summary(run, metrics, tags, None, done=True)
    return run


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install -y chromium)")
def test_the_ui_lists_parent_runs_with_their_aggregates(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = StudyTracker(uri, "ui_check")
    experiment = tracker.experiment_id("UI check")
    for name, objective in (("llama_parent", 13.2), ("cem_attention_parent", 12.4)):
        run = add_parent(tracker, name, {"objective_star": objective, "n_seeds": 3.0},
                         {T.VERDICT_PREFIX + "llama": "better"})
    assert tracker.client.get_experiment(experiment).tags[T.EXPERIMENT_KIND] == T.TRAINING_KIND
    parent = tracker.client.get_run(run).data
    assert parent.metrics["objective_star"] == 12.4 and parent.tags[T.VERDICT_PREFIX + "llama"] == "better"

    table = rendered_experiment(uri, experiment, tmp_path, "profile-ml", query="?workflowType=machine_learning")
    assert "llama_parent" in table and "cem_attention_parent" in table  # the runs table, parents listed


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install -y chromium)")
def test_cem_ablate_ui_opens_the_plain_experiment_url_on_the_aggregate_columns(tmp_path):
    """The acceptance of issue 11: the experiment's plain URL, a fresh browser profile."""
    from cem_ablate.tracking.server import UI_APP

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = StudyTracker(uri, "plain_url")
    experiment = tracker.experiment_id("plain URL check")
    common = {"n_seeds": 3.0, "lr_star": 0.002}
    add_parent(tracker, "llama_parent", common | {"objective_star": 13.2}, {})
    add_parent(tracker, "cem_parent", common | {"objective_star": 12.4, "objective_star_low": 12.1,
                                                 "objective_star_high": 12.6, "delta_vs_llama": -0.75,
                                                 "delta_vs_llama/low": -1.1, "delta_vs_llama/high": -0.4,
                                                 "delta_vs_llama/p_value": 0.0031, "delta_vs_llama/p_holm": 0.0062,
                                                 "delta_vs_T1": 0.31, "delta_vs_T1/p_holm": 0.0123},
               {T.VERDICT_PREFIX + "llama": "better", T.VERDICT_PREFIX + "T1": "worse"})

    # The answer -- per baseline (two, as Fig. 4's layout) the verdict, Holm p and Δ -- on
    # a 1600 px screen without scrolling (the table renders only the columns in view).
    page = rendered_experiment(uri, experiment, tmp_path, "profile-plain", width=1600, app_name=UI_APP)
    assert "llama_parent" in page and "cem_parent" in page  # the runs table, not the GenAI overview
    for column in (T.VERDICT_PREFIX + "llama", "delta_vs_llama/p_holm", "delta_vs_llama", T.VERDICT_PREFIX + "T1",
                   "delta_vs_T1/p_holm", "delta_vs_T1", "objective_star"):
        assert column in page, column
    for value in ("better", "worse", "0.0062", "0.0123", "-0.75", "0.31", "12.4"):  # the parent run's values
        assert value in page, value
