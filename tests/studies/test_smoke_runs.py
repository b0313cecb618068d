"""The smoke scale of a study file runs to the end on CPU and reports (real engine,
real Optuna SQLite storage, real MLflow SQLite store, all under a tmp dir).

Two files stand for the rest: one language-model figure (Fig. 2a: a CEM variant and
its Llama baseline on the offline corpus) and the GP table (eight variants, RMSE
metric, named as such in `cem-ablate report`). Every other file shares their
smoke scale's shape; docs/lab-notes/results-log.md (section 12) lists the measured smoke runs of all of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cem_ablate.cli.main import main
from cem_ablate.tracking.readback import read_study

ROOT = Path(__file__).resolve().parents[2]


def run_smoke(name: str, tmp_path: Path) -> str:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code = main(
        [
            "study",
            str(ROOT / "studies" / f"{name}.yaml"),
            "--scale",
            "smoke",
            "--threads",
            "1",
            "--storage",
            f"sqlite:///{tmp_path}/optuna.db",
            "--tracking-uri",
            uri,
            "--workdir",
            str(tmp_path / "work"),
            "--report-dir",
            str(tmp_path / "reports"),
        ]
    )
    assert code == 0
    return uri


@pytest.mark.slow
def test_fig2a_smoke_runs_and_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    uri = run_smoke("fig2a_cem_attention", tmp_path)
    records = read_study(uri, "fig2a_cem_attention_smoke")
    assert sorted(r.name for r in records) == ["cem_attention,size=tiny", "llama,size=tiny"]
    for r in records:
        assert [t.status for t in r.trials] == ["finished"]
        assert r.ppl_star is not None and 1.0 < r.ppl_star < 300.0  # byte vocabulary: ppl < 257-ish
    report = (tmp_path / "reports" / "fig2a_cem_attention_smoke" / "report.md").read_text()
    # the Δ table: one row per comparison, the baseline in its own column
    assert "| cem_attention,size=tiny | llama,size=tiny |" in report and "(baseline)" in report


@pytest.mark.slow
@pytest.mark.soak
def test_gp_smoke_runs_and_the_report_reads_rmse(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    uri = run_smoke("table3_gp", tmp_path)
    records = read_study(uri, "table3_gp_smoke")
    assert len(records) == 8
    for r in records:
        (trial,) = r.trials
        assert trial.status == "finished" and 0.0 < trial.value < 10.0  # an RMSE, not a perplexity
    out = tmp_path / "table"
    assert (
        main(
            [
                "report",
                str(ROOT / "studies" / "table3_gp.yaml"),
                "--scale",
                "smoke",
                "--tracking-uri",
                uri,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = (out / "report.md").read_text()
    assert "test RMSE at lr* [95%]" in report and "mean ± std" in report
    assert "perplexity" not in report and "ppl*" not in report  # the task's metric, named
    rows = [line for line in report.splitlines() if line.startswith("| gp.kernel=")]
    assert len(rows) >= 8
    # parameters are the same for every T (recursion adds compute, not parameters)
    params = {row.split("|")[2].strip() for row in rows[:8]}
    assert len(params) == 1
    assert (out / "ppl_vs_lr.png").stat().st_size > 0
