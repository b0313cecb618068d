"""A study with `eval:` scores every finished trial with lm-evaluation-harness (a local
task, offline), logs the metric on every child and the report shows it with verdicts;
an unknown task is one error line before anything is created."""

from pathlib import Path

import pytest
from mlflow import MlflowClient

from cem_ablate.cli.main import main
from cem_ablate.config.trial_status import TrialStatus
from tests.evaluation.local_tasks import MC_DOCS, write_tasks
from tests.study.tiny_study import write_study

pytest.importorskip("lm_eval")


def test_unknown_eval_task_is_one_error_before_anything(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_study(tmp_path, name="badeval", grid=(4e-3,), corpus=corpus, eval={"tasks": ["no_such_task"]})
    assert main(["study", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: eval.tasks: unknown lm-evaluation-harness task")
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "runs").exists()


@pytest.mark.soak  # in CI the harness on the platform's models: tests/evaluation/test_harness.py
def test_every_finished_trial_is_scored_and_reported(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tasks = write_tasks(tmp_path / "tasks")
    path = write_study(
        tmp_path,
        name="evalstudy",
        grid=(4e-3,),
        corpus=corpus,
        seeds=[0, 1],
        eval={"tasks": ["cem_mc"], "limit": len(MC_DOCS), "include_path": str(tasks)},
    )
    assert main(["study", str(path), "--report-dir", str(tmp_path / "reports")]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "warning: eval" not in captured.err, captured.err

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("evalstudy")
    children = [
        r
        for r in client.search_runs([experiment.experiment_id])
        if r.data.tags.get("cem_ablate.status") == TrialStatus.FINISHED.value and "lr" in r.data.tags
    ]
    assert len(children) == 4  # 2 variants x 1 lr x 2 seeds
    missing = [
        (r.info.run_name, r.data.tags.get("cem_ablate.reused_from"), sorted(r.data.metrics))
        for r in children
        if "eval/cem_mc/acc" not in r.data.metrics
    ]
    assert not missing, missing
    scores = [r.data.metrics["eval/cem_mc/acc"] for r in children]
    assert all(s in {i / len(MC_DOCS) for i in range(len(MC_DOCS) + 1)} for s in scores)

    report = Path(tmp_path / "reports" / "evalstudy" / "report.md").read_text()
    assert "## Downstream tasks (lm-evaluation-harness)" in report and "Downstream tasks" in out
    table = report.split("## Downstream tasks", 1)[1]
    assert "| cem_attention | llama | cem_mc/acc | baseline lr* |" in table
    assert "(n=2)" in table
