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
answer's columns (tracking.comparison_columns), which the second test checks as a
1600 x 1000 screen shows them (tests/tracking/browser.py: the DevTools protocol).
"""

import json
import socket
import subprocess
import time

import pytest

from cem_ablate.tracking import tags as T
from cem_ablate.tracking.server import TrackingServer
from cem_ablate.tracking.study_runs import StudyTracker, VariantRunInfo
from tests.tracking.browser import ARIAL_METRICS, CHROMIUM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dom(url: str, profile, width: int = 1600) -> str:
    """The rendered page; the runs table renders only the columns in view: `width`."""
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            f"--window-size={width},1000",
            "--virtual-time-budget=20000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout


def rendered_experiment(
    uri: str, experiment: str, tmp_path, profile: str, query: str = "", width: int = 1600, app_name: str | None = None
) -> str:
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
@pytest.mark.soak
def test_the_ui_lists_parent_runs_with_their_aggregates(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = StudyTracker(uri, "ui_check")
    experiment = tracker.experiment_id("UI check")
    for name, objective in (("llama_parent", 13.2), ("cem_attention_parent", 12.4)):
        run = add_parent(
            tracker, name, {"objective_star": objective, "n_seeds": 3.0}, {T.VERDICT_PREFIX + "llama": "better"}
        )
    assert tracker.client.get_experiment(experiment).tags[T.EXPERIMENT_KIND] == T.TRAINING_KIND
    parent = tracker.client.get_run(run).data
    assert parent.metrics["objective_star"] == 12.4 and parent.tags[T.VERDICT_PREFIX + "llama"] == "better"

    table = rendered_experiment(uri, experiment, tmp_path, "profile-ml", query="?workflowType=machine_learning")
    assert "llama_parent" in table and "cem_attention_parent" in table  # the runs table, parents listed


STUDY = {  # variant -> {baseline: (Δ, low, high, p, Holm p, verdict)}: a 3-variant study, two baselines
    "llama": {},
    "cem_attention": {
        "llama": (-0.14893621, -0.31245, 0.0124567, 0.0123456, 0.0370368, "unresolved"),
        "dim_matched": (-0.7512345, -1.10234, -0.40012, 0.0031234, 0.0062468, "better"),
    },
    "full_cem_T2": {
        "llama": (0.3112345, 0.1002, 0.52234, 0.00041234, 0.0016494, "worse"),
        "dim_matched": (0.0212345, -0.2, 0.24, 0.81234, 0.81234, "unresolved"),
    },
}


def significant_digits(text: str) -> int:
    mantissa = text.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa)


@pytest.mark.slow
@pytest.mark.skipif(
    not ARIAL_METRICS, reason="no Arial-metric font (apt-get install -y fonts-liberation): the widths are sized for it"
)
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install -y chromium)")
def test_cem_ablate_ui_opens_on_the_answer_readable_at_1600_px(tmp_path):
    """The answer readable with no setup: the experiment's plain URL in a fresh browser
    profile at 1600 x 1000 shows, per variant and baseline, Δ, its interval, the Holm p and
    the verdict, each header and value whole (not cut), left of the screen's edge, values at
    <= 4 significant digits; the assistant panel is closed. Also when the browser first came
    while the study's first trials trained (the view is stored on the first visit)."""
    pytest.importorskip("websocket", reason="websocket-client (the test extra) drives Chromium")
    from cem_ablate.tracking.comparison_columns import BaselineAnswer, display_record
    from cem_ablate.tracking.server import UI_APP
    from tests.tracking.browser import Chromium

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = StudyTracker(uri, "plain_url")
    experiment = tracker.experiment_id("plain URL check")
    # The study as the browser first sees it (its first trials training: only the verdict
    # tags and the optimum published yet; the view is stored then), and when it is done.
    runs, records = {}, {}
    for name, tests in STUDY.items():
        answers = [BaselineAnswer(b, *t) for b, t in tests.items()]
        metrics, tags = display_record(answers, "holm", "ppl", lr_star=0.0021234567, objective_star=16.91234567)
        # beside them the full-precision metrics and tags the publisher logs (not on screen)
        metrics |= {"objective_star": 16.91234567} | {f"delta_vs_{b}": t[0] for b, t in tests.items()}
        tags |= {T.VERDICT_PREFIX + b: t[5] for b, t in tests.items()}
        records[name] = metrics, tags
        runs[name] = add_parent(
            tracker,
            name,
            {k: metrics[k] for k in ("lr opt", "ppl opt")},
            {k: "unresolved" for k in tags if k.startswith(("verdict ", T.VERDICT_PREFIX))},
        )
    verdict_cells = "document.querySelectorAll('.ag-cell[col-id^=\"tags.`verdict\"]').length >= 3"

    with (
        TrackingServer(uri, "127.0.0.1", free_port(), str(tmp_path / "artifacts"), app_name=UI_APP) as server,
        Chromium(tmp_path / "profile", width=1600, height=1000) as browser,
    ):
        assert server.wait_ready()
        url = f"{server.url}/#/experiments/{experiment}"
        browser.open(url)
        assert browser.wait_for(verdict_cells)
        for name, (metrics, tags) in records.items():
            tracker.log_variant_summary(runs[name], metrics, tags, None, done=True)
        browser.open("about:blank")
        browser.open(url)
        assert browser.wait_for(verdict_cells + " && document.body.innerText.includes('better')")
        time.sleep(1)  # the saved column widths are applied right after the first render
        table = browser.table()
        browser.screenshot(tmp_path / "runs_table.png")  # kept with the test's folder, for a look
        # the assistant panel's greeting (MLflow 3.17 opens it by itself on a local server's first visit)
        assistant_open = browser.evaluate("document.body.innerText.includes('Ask questions about your experiments')")

    assert not assistant_open
    assert (table["width"], table["height"]) == (1600, 1000)
    headers = {h["col"]: h for h in table["headers"]}
    answer = [
        f"{group}.`{name} {b}`"
        for b in ("llama", "dim_matched")
        for group, name in (("metrics", "Δ"), ("tags", "CI"), ("metrics", "Holm p"), ("tags", "verdict"))
    ]
    for column in ["attributes.`Run Name`"] + answer:
        h = headers.get(column)
        assert h is not None, f"{column} not rendered (off screen): {sorted(headers)}"
        assert h["right"] <= table["width"] and not h["cut"], h
        assert h["text"] == column.split(".", 1)[1].strip("`") or column.startswith("attributes")
    cells = [c for c in table["cells"] if c["col"] in answer or c["col"] == "attributes.`Run Name`"]
    shown = {c["text"] for c in cells}
    assert {"cem_attention", "full_cem_T2", "llama"} <= {t.split("\n")[-1] for t in shown}
    assert {
        "-0.1489",
        "[-0.312, 0.0125]",
        "0.03704",
        "unresolved",
        "-0.7512",
        "0.006247",
        "better",
        "0.3112",
        "0.001649",
        "worse",
    } <= shown, shown
    for c in cells:
        assert c["right"] <= table["width"] and not c["cut"], c
        if c["col"].startswith("metrics.") and c["text"] != "-":
            assert significant_digits(c["text"]) <= 4, c


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install -y chromium)")
@pytest.mark.soak
def test_a_plain_mlflow_server_opens_the_studys_shared_view(tmp_path):
    """MLflow's own shared view (experiment tag `mlflow.sharedViewState.<key>`): the same
    answer columns from a plain `mlflow server` (a cluster's tracking server), any browser."""
    pytest.importorskip("websocket", reason="websocket-client (the test extra) drives Chromium")
    from cem_ablate.tracking.comparison_columns import BaselineAnswer, display_record
    from cem_ablate.tracking.runs_table_view import SHARED_VIEW_TAG, share_views, shared_view_url
    from tests.tracking.browser import Chromium

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = StudyTracker(uri, "shared")
    experiment = tracker.experiment_id("shared view check")
    for name, tests in STUDY.items():
        metrics, tags = display_record([BaselineAnswer(b, *t) for b, t in tests.items()], "holm", "ppl", 0.002, 16.9)
        add_parent(tracker, name, metrics, tags | {T.VERDICT_PREFIX + b: t[5] for b, t in tests.items()})
    assert share_views(uri, "shared") == {experiment: "cem-ablate"}
    assert "Holm p llama" in tracker.client.get_experiment(experiment).tags[SHARED_VIEW_TAG]

    with (
        TrackingServer(uri, "127.0.0.1", free_port(), str(tmp_path / "artifacts")) as server,
        Chromium(tmp_path / "profile") as browser,
    ):
        assert server.wait_ready()
        browser.open(shared_view_url(server.url, experiment))
        assert browser.wait_for("document.body.innerText.includes('better')")
        time.sleep(1)
        table = browser.table()
    # The view's columns, in its order, from the left (a plain server's assistant panel,
    # open on a first visit, may push the last ones off screen: not our page there).
    shown = [
        h["col"]
        for h in sorted(table["headers"], key=lambda h: h["left"])
        if h["col"].startswith(("metrics.", "tags."))
    ]
    view = json.loads(tracker.client.get_experiment(experiment).tags[SHARED_VIEW_TAG])
    assert len(shown) >= 4 and shown == view["selectedColumns"][: len(shown)], shown
    assert shown[:4] == [
        "metrics.`Δ dim_matched`",
        "tags.`CI dim_matched`",
        "metrics.`Holm p dim_matched`",
        "tags.`verdict dim_matched`",
    ]
    assert not any(h["cut"] for h in table["headers"] if h["col"] in shown)
