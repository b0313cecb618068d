"""`cem-ablate report STUDY_FILE` reads a finished study from its stores alone: when the
plugin that provided a component fails to import, or is no longer installed, it says
which component (and plugin) is missing in one `warning:` line and still prints and
writes the tables. The study is docs/reference/components.md's plugin study at its smoke
scale, trained with the plugin installed (tests/test_plugins.py installs it the same way)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_plugins import BROKEN, _documented_files, _documented_plugin, _install

ROOT = Path(__file__).resolve().parents[2]


def _cli(args, cwd: Path, site: Path | None):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([str(site)] if site else []))
    return subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_report_of_a_finished_study_whose_plugin_is_gone(tmp_path):
    module, entry_points = _documented_plugin()
    site = tmp_path / "site"
    _install(site, "my-mlp", {"my_mlp": module}, entry_points)
    (tmp_path / "squared_relu.yaml").write_text(_documented_files()["squared_relu.yaml"])
    study = _cli(
        ["study", "squared_relu.yaml", "--scale", "smoke", "--threads", "1", "--workers", "1", "--no-report"],
        tmp_path,
        site,
    )
    assert study.returncode == 0, study.stdout[-3000:] + study.stderr[-3000:]

    report_args = ["report", "squared_relu.yaml", "--scale", "smoke", "--out", "report"]
    (site / "my_mlp.py").write_text(BROKEN)  # the plugin no longer imports
    broken = _cli(report_args, tmp_path, site)
    assert broken.returncode == 0, broken.stderr[-3000:]
    [warning] = [line for line in broken.stderr.splitlines() if line.startswith("warning: squared_relu.yaml")]
    assert (
        "mlp component 'squared_relu' (plugin 'my_components' (entry point my_mlp) failed to load: "
        "ModuleNotFoundError: No module named 'missing_dependency_of_the_plugin')"
    ) in warning
    assert "study 'squared_relu_smoke'" in warning
    assert "squared_relu" in broken.stdout and "llama" in broken.stdout
    text = (tmp_path / "report" / "report.md").read_text()
    assert "squared_relu" in text and "llama" in text

    gone = _cli(report_args + ["--out", "report2"], tmp_path, None)  # uninstalled: no entry point at all
    assert gone.returncode == 0, gone.stderr[-3000:]
    assert [line for line in gone.stderr.splitlines() if line.startswith(("warning:", "error:"))] == [
        "warning: squared_relu.yaml: mlp component 'squared_relu' (no installed plugin registers it); the report "
        "reads the MLflow store alone: the newest run of each variant of study 'squared_relu_smoke', its verdicts "
        "by the design the study recorded."
    ]
    assert (tmp_path / "report2" / "report.md").read_text() == text.replace("report/", "report2/")

    typo = _cli(["report", "squared_relu.yaml", "--scale", "smok"], tmp_path, None)  # other errors stand
    assert typo.returncode != 0 and typo.stderr.startswith("error:")
