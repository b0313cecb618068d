"""The report's width and GP-draws sections on synthetic statistics, no MLflow."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from cem_ablate.analysis.statistics import Observation, variant_stats
from cem_ablate.reporting.gp_draws_report import GPDrawsDesign
from cem_ablate.reporting.gp_draws_report import analyze as gp_analyze
from cem_ablate.reporting.gp_draws_report import section_lines as gp_lines
from cem_ablate.reporting.width_report import T1_VS_LLAMA, T2_VS_T1, WidthDesign, analyze, plot_section, section_lines

LRS = (1e-3, 2e-3, 4e-3)
WIDTHS = (32, 64, 128, 192)


def _stats(level: float, seed_values: dict[int, float], curvature=0.3):
    """A bowl in log2 lr with its minimum at 2e-3; per-seed offsets shared across lrs."""
    obs = [
        Observation(lr, s, level * (1 + curvature * math.log2(lr / 2e-3) ** 2 / 10) + off)
        for lr in LRS
        for s, off in seed_values.items()
    ]
    return variant_stats(obs, intervals=False)


@pytest.fixture
def synthetic():
    rng = np.random.default_rng(0)
    design = WidthDesign({"600 steps": {w: {a: f"d{w}_{a}" for a in ("T1", "T2", "llama")} for w in WIDTHS}})
    st, expected = {}, {}
    for w in WIDTHS:
        x = math.log2(w / 64)
        t1 = {s: 0.05 * rng.standard_normal() for s in range(3)}
        penalty = 0.16 - 0.08 * x
        st[f"d{w}_T1"] = _stats(6.0, t1)
        st[f"d{w}_T2"] = _stats(6.0 * math.exp(penalty), {s: v * math.exp(penalty) for s, v in t1.items()})
        st[f"d{w}_llama"] = _stats(5.8, {s: 0.05 * rng.standard_normal() for s in range(3)})
        t1v, t2v = st[f"d{w}_T1"].at(2e-3).by_seed(), st[f"d{w}_T2"].at(2e-3).by_seed()
        expected[w] = np.mean([math.log(t2v[s] / t1v[s]) for s in range(3)])
    return design, st, expected


def test_width_section_recomputes_with_scipy(synthetic, tmp_path):
    design, st, expected = synthetic
    energy = {
        "d64_T2": [
            {"energy/blocks.0.attention/step1": 2.0, "energy/blocks.0.attention/step2": 1.0},
            {"energy/blocks.0.attention/step1": 2.0, "energy/blocks.0.attention/step2": 3.0},
        ]
    }
    section = analyze(design, st, {f"d{w}_T2": True for w in WIDTHS}, energy=energy)
    t2 = next(t for t in section.trends if t.comparison == T2_VS_T1)
    ref = stats.linregress([math.log2(w / 64) for w in WIDTHS], [expected[w] for w in WIDTHS])
    assert t2.trend.b == pytest.approx(ref.slope, abs=1e-6) and t2.lrs == {w: 2e-3 for w in WIDTHS}
    assert t2.verdict == "shrinks" and t2.trend.crossing.low is not None
    assert section.energy == {"600 steps": {64: (1, 2)}}
    t1 = next(t for t in section.trends if t.comparison == T1_VS_LLAMA)
    assert all(d.decision.test == "Welch t" for d in t1.deltas)
    # Holm over the section's two slope tests
    ps = sorted(t.trend.p for t in section.trends)
    assert min(t.p_holm for t in section.trends) == pytest.approx(min(1.0, 2 * ps[0]))
    lines = section_lines(section, "test perplexity")
    text = "\n".join(lines)
    assert "b = " in text and "zero crossing d0" in text and "1/2 (50%)" in text
    assert plot_section(section, tmp_path / "width.png", "t").stat().st_size > 0
    svg = (tmp_path / "width.svg").read_text()  # beside the PNG; every mark in a legend
    assert "Δ = 0: no difference" in svg and "95% interval" in svg


def test_flat_width_trend_says_none(synthetic):
    design, st, _ = synthetic
    for w in WIDTHS:  # the same penalty at every width: b ~ 0
        t1 = st[f"d{w}_T1"].at(2e-3).by_seed()
        st[f"d{w}_T2"] = _stats(
            6.0 * math.exp(0.1), {s: (v * math.exp(0.1)) + 0.02 * ((s + w) % 3 - 1) for s, v in t1.items()}
        )
    section = analyze(design, st, {f"d{w}_T2": True for w in WIDTHS})
    t2 = next(t for t in section.trends if t.comparison == T2_VS_T1)
    if t2.trend.b_low < 0 < t2.trend.b_high:
        assert t2.verdict == "unresolved" and "zero crossing: none" in "\n".join(section_lines(section, "ppl"))


def test_gp_draws_section_treats_the_draw_as_the_unit():
    rng = np.random.default_rng(1)
    design = GPDrawsDesign({"rbf": {t: {d: f"rbf_T{t}_d{d}" for d in range(3)} for t in (1, 4)}})
    st = {}
    for d in range(3):
        level = 0.5 + 0.05 * d  # draws differ in difficulty
        for t, gain in ((1, 0.0), (4, -0.02)):
            st[f"rbf_T{t}_d{d}"] = _stats(level + gain, {s: 0.005 * rng.standard_normal() for s in range(3)})
    rows = gp_analyze(design, st)
    deep = next(r for r in rows if r.summary.depth == 4)
    means4 = [np.mean(list(st[f"rbf_T4_d{d}"].at(2e-3).by_seed().values())) for d in range(3)]
    means1 = [np.mean(list(st[f"rbf_T1_d{d}"].at(2e-3).by_seed().values())) for d in range(3)]
    assert deep.decision.p == pytest.approx(stats.ttest_rel(means4, means1).pvalue, rel=1e-9)
    assert deep.summary.pooled.n == 3 and deep.edges == []
    text = "\n".join(gp_lines(rows, {("rbf", 0): 0.287}, "test RMSE"))
    assert "Exact-GP floor" in text and "rbf draw 0: 0.2870" in text
