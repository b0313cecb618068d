"""The report's learning-rate drift section (docs/design/parametrization.md#s12-parametrization, reporting/lr_drift_report.py)."""

from pathlib import Path

import pytest

from cem_ablate.cli.main import main
from cem_ablate.cli.study_command import load_expanded
from cem_ablate.reporting.lr_drift_report import width_families
from cem_ablate.tracking.readback import read_study

STUDIES = Path(__file__).resolve().parents[2] / "studies"
FAMILIES = {"llama", "cem_attention_T1", "cem_attention_T2", "cem_mlp_T1", "full_cem_T2"}


def test_width_families_group_variants_that_differ_in_width_alone():
    families = width_families(load_expanded(str(STUDIES / "mup_width.yaml"), "cpu", []))
    assert set(families) == FAMILIES
    for members in families.values():
        assert [v.config.model.dims.d_model for v in members] == [32, 64, 128, 256]
    # the same file at one width has no family (and no section)
    assert width_families(load_expanded(str(STUDIES / "mup_width.yaml"), "steps", [])) == {}


@pytest.mark.slow
@pytest.mark.soak  # in CI the drift's families and fits: the unit tests above and tests/analysis/test_lr_drift_bootstrap.py
def test_the_smoke_study_reports_each_familys_drift(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code = main(
        [
            "study",
            str(STUDIES / "mup_width.yaml"),
            "--scale",
            "smoke",
            "--threads",
            "1",
            "--workers",
            "1",
            "--set",
            "lr_search.grid=[1e-3,4e-3,1.6e-2]",
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
    report = (tmp_path / "reports" / "mup_width_smoke" / "report.md").read_text()
    assert "## Learning-rate drift across width" in report
    rows = [line for line in report.splitlines() if line.startswith("| cem_attention_T1 | mup |")]
    assert len(rows) == 1, report  # d32 and d64 of CEM attention T=1; Llama has one width: no row
    stars = {r.name: r.metrics["lr_star"] for r in read_study(uri, "mup_width_smoke")}
    low, high = sorted([stars["d32_cem_attention_T1"], stars["d64_cem_attention_T1"]])
    assert f"| {high / low:.2f}x" in rows[0], (rows[0], stars)
    assert f"{stars['d32_cem_attention_T1']:.3g}" in rows[0] and f"{stars['d64_cem_attention_T1']:.3g}" in rows[0]
