"""The width study and the GP-draws study: designs, reuse, the dry run."""

from __future__ import annotations

from pathlib import Path

import pytest

from cem_ablate.cli.main import main
from cem_ablate.cli.study_command import load_expanded
from cem_ablate.reporting.gp_draws_report import gp_draws_design
from cem_ablate.reporting.width_report import width_design

STUDIES = Path(__file__).resolve().parents[2] / "studies"


def expanded(name: str, scale: str | None = "cpu"):
    return load_expanded(str(STUDIES / f"{name}.yaml"), scale, [])


def test_width_design_has_every_width_arm_and_both_budgets():
    study = expanded("width")
    design = width_design(study)
    assert set(design.budgets) == {"600 steps", "2.66 tokens/parameter"}
    assert list(design.budgets["600 steps"]) == [32, 64, 128, 192]
    assert list(design.budgets["2.66 tokens/parameter"]) == [32, 64, 128]
    for widths in design.budgets.values():
        assert all(set(arms) == {"T1", "T2", "llama"} for arms in widths.values())
    # d 128's 600-step runs serve both budgets
    assert design.budgets["600 steps"][128] == design.budgets["2.66 tokens/parameter"][128]
    by_key = {v.key: v for v in study.variants}
    for width, arms in design.budgets["600 steps"].items():
        dims = by_key[arms["T2"]].config.model.dims
        assert (dims.d_model, dims.n_layers, dims.n_heads) == (width, 2, 4)
        assert dims.d_mlp % 8 == 0 and 0 <= dims.d_mlp - 8 * width / 3 < 8  # 8/3 d rounded up to 8
        assert by_key[arms["T2"]].baselines == {"T1": arms["T1"], "llama": arms["llama"]}
    assert study.spec.seeds == [0, 1, 2] and len(study.spec.lr_search.grid) >= 3


def test_width_study_reuses_the_readings_variants():
    """d 64 is readings arm A and d 128 is arm F: same variant keys, so same trial keys."""
    width = {v.name: v.variant_key for v in expanded("width").variants}
    readings = {v.name: v.variant_key for v in expanded("readings").variants}
    arm_f = {v.name: v.variant_key for v in expanded("readings_d128").variants}
    assert (width["d64_T1"], width["d64_T2"]) == (readings["A_T1"], readings["A_T2"])
    assert (width["d128_T1"], width["d128_T2"]) == (arm_f["F_T1"], arm_f["F_T2"])


def test_wide_grid_is_the_cpu_study_with_one_more_learning_rate_each_side():
    """`--scale cpu_wide` widens the grid where the cpu run found lr* at an edge: same
    variants (trial keys, so the cpu trials are reused), the cpu grid inside it."""
    cpu, wide = expanded("width"), expanded("width", "cpu_wide")
    assert [v.variant_key for v in wide.variants] == [v.variant_key for v in cpu.variants]
    grid, inner = wide.spec.lr_search.grid, cpu.spec.lr_search.grid
    assert grid[1:-1] == inner and grid[0] < inner[0] and grid[-1] > inner[-1]
    assert wide.spec.name != cpu.spec.name and wide.spec.seeds == cpu.spec.seeds
    assert width_design(wide).budgets.keys() == width_design(cpu).budgets.keys()


def test_width_smoke_has_three_widths():
    assert list(width_design(expanded("width", "smoke")).budgets["4 steps"]) == [32, 64, 128]


def test_width_dry_run_lists_widths_budgets_seeds_and_cpu_time(capsys):
    assert main(["study", str(STUDIES / "width.yaml"), "--scale", "cpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for name in ("d32_T1", "d64_T2", "d128_llama", "d192_T2", "d32_tpp_T2", "d64_tpp_llama"):
        assert name in out
    assert "seeds [0, 1, 2]" in out and "600" in out and "174" in out  # budgets: 600 steps; 174 = d 64 at 2.66/param
    assert "CPU:" in out and "CPU-hours" in out


@pytest.mark.parametrize("scale", ["cpu", "smoke"])
def test_gp_draws_design(scale):
    study = expanded("table3_gp_draws", scale)
    design = gp_draws_design(study)
    draws = {d for depths in design.kernels.values() for by_draw in depths.values() for d in by_draw}
    assert draws == ({0, 1, 2} if scale == "cpu" else {0, 1})
    if scale == "cpu":
        assert set(design.kernels) == {"rbf", "nonstationary"}
        assert len(study.spec.lr_search.grid) >= 4 and study.spec.seeds == [0, 1, 2]
    assert gp_draws_design(expanded("table3_gp", None)) is None  # one draw: no section


@pytest.mark.slow
@pytest.mark.soak  # in CI the width report's statistics: tests/reporting/test_width_report.py
def test_width_smoke_report_slope_matches_scipy_on_the_children(tmp_path, monkeypatch, capsys):
    """The width report's slope is right, at smoke scale: b recomputed from the MLflow
    children's final metrics with scipy.stats.linregress equals the report's to 1e-6."""
    import math
    import re

    from scipy import stats

    from cem_ablate.tracking.readback import read_study

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert (
        main(
            [
                "study",
                str(STUDIES / "width.yaml"),
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
        == 0
    )
    records = {r.name: r for r in read_study(uri, "width_smoke")}
    xs, ys = [], []
    for w in (32, 64, 128):
        t2, t1 = ({t.seed: t.value for t in records[f"d{w}_{arm}"].trials} for arm in ("T2", "T1"))
        xs.append(math.log2(w / 64))
        ys.append(sum(math.log(t2[s] / t1[s]) for s in t1) / len(t1))
    report = (tmp_path / "reports" / "width_smoke" / "report.md").read_text()
    b = float(re.search(r"T=2 vs T=1: .*? b = ([-+0-9.]+)", report).group(1))
    assert b == pytest.approx(stats.linregress(xs, ys).slope, abs=1e-6)
    assert (tmp_path / "reports" / "width_smoke" / "width.png").exists()
    assert re.search(r"\| 4 steps \| CEM attention T=2 vs T=1 \| 64 \| .*\| \d/\d", report)  # energy fraction
