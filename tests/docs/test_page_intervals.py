"""The intervals the results pages print in their prose (scripts/page_intervals.py) hold their
nominal 95% in simulation from models fitted to the pages' own data, and the check can fail."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.analysis.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
BAND = (0.93, 0.97)  # 2,000 simulated studies: a 95% interval's coverage within Monte Carlo error


@pytest.fixture(scope="module")
def pi():
    return load_script("page_intervals")


@pytest.fixture(scope="module")
def pages():
    return load_script("results_pages")


def _readings(pages):
    arms = pages.report_trials(ROOT, "readings_cpu")
    return {arm: (pages._at_rate(arms, f"{arm}_T2", 0.002), pages._at_rate(arms, f"{arm}_T1", 0.002)) for arm in "ABC"}


def test_paired_log_ratio_covers_at_its_level_on_the_pages_data(pi, pages):
    for t2, t1 in _readings(pages).values():
        assert BAND[0] <= pi.log_ratio_coverage(t2, t1, paired=True) <= BAND[1]
    decode = json.loads((ROOT / "benchmarks/results/decode_86M_ctx512.json").read_text("utf-8"))
    rows = {r["variant"]: r for r in decode["rows"] if not r.get("error")}
    llama, full = rows["llama"]["decode_s"]["1"], rows["cem_full_t2"]["decode_s"]["1"]
    assert BAND[0] <= pi.log_ratio_coverage(llama, full, paired=True, seed=3) <= BAND[1]


def test_welch_mean_and_difference_cover_at_their_level(pi, pages):
    width = pages.report_trials(ROOT, "width_cpu")
    t1, llama = pages._at_rate(width, "d64_tpp_T1", 0.002), pages._at_rate(width, "d64_tpp_llama", 0.002)
    assert BAND[0] <= pi.log_ratio_coverage(t1, llama, paired=False) <= BAND[1]
    assert BAND[0] <= pi.mean_coverage(t1) <= BAND[1]
    assert BAND[0] <= pi.difference_coverage(t1, llama) <= BAND[1]


def test_the_coverage_check_can_fail():
    # A z interval (normal quantile) on 3 seed pairs misses far more than 5% at the readings' own spread.
    rng = np.random.default_rng(0)
    sim = rng.normal(0.11, 0.03, (2000, 3))
    half = stats.norm.ppf(0.975) * sim.std(axis=1, ddof=1) / math.sqrt(3)
    assert float((np.abs(sim.mean(axis=1) - 0.11) <= half).mean()) < BAND[0]


def test_log_ratio_is_the_reports_own_interval(pi, pages):
    # the width report's own row for T = 1 vs Llama at d 128 (Welch on log perplexity)
    import re

    text = (ROOT / "docs/figures/width_cpu/report.md").read_text("utf-8")
    row = re.search(r"\| 600 steps \| CEM attention T=1 vs Llama \| 128 \| 0\.002 \| 3 \| (\S+) \[(\S+), (\S+)\]", text)
    width = pages.report_trials(ROOT, "width_cpu")
    e = pi.log_ratio(pages._at_rate(width, "d128_T1", 0.002), pages._at_rate(width, "d128_llama", 0.002), paired=False)
    printed = tuple(float(row[i]) for i in (1, 2, 3))
    assert (math.log(e.value), math.log(e.low), math.log(e.high)) == pytest.approx(printed, abs=6e-4)


def test_a_paired_ratio_refuses_unpaired_values(pi):
    with pytest.raises(ValueError, match="error: a paired ratio"):
        pi.log_ratio([1.0, 2.0, 3.0], [1.0, 2.0], paired=True)


def _step_curves(pages, option):
    trials = pages.report_trials(ROOT, "mup_steps_cpu")
    return [pages._curve(trials[f"cem_attention_T{t},step_scaling={option}"]) for t in (1, 2, 4)]


def test_the_drift_interval_holds_its_estimate_and_is_refused_at_an_edge(pi, pages):
    e = pi.drift(_step_curves(pages, "inverse_steps"))
    assert 1.0 <= e.low <= e.value <= e.high
    lrs, table = _step_curves(pages, "inverse_steps")[0]
    edge = np.array(table)
    edge[:, 0] -= 5.0  # the lowest rate now the best by far: lr* at the grid's edge
    assert pi.drift([(lrs, edge), (lrs, table)]).low is None


def test_the_drift_interval_is_conservative_on_the_step_scaling_trials(pi, pages):
    coverage, printed = pi.drift_coverage(_step_curves(pages, "inverse_steps"), reps=500)
    assert printed > 0.5
    assert coverage >= 0.95


@pytest.mark.soak  # 2,000 studies per curve for every lr* ratio the pages print: about half a minute
def test_every_printed_lr_ratio_is_conservative_at_2000_studies(pi, pages):
    import mup_width_csv_report as mw

    checks = [_step_curves(pages, option) for option in ("none", "inverse_steps")]
    gpu = ROOT / "docs/figures/mup_width_gpu_scaled"
    three = [str(gpu / f) for f in ("trials.csv", "trials_lease2.csv")]
    five = three + [str(gpu / f) for f in ("trials_lease4_proxy5.csv", "trials_lease5_d256_dense.csv")]
    values, _ = mw.read_trials(five)
    checks += [[pages._curve(values[f"d{d}_{family}"]) for d in (32, 64, 128, 256)] for family in mw.FAMILIES]
    for curves in checks:
        coverage, printed = pi.drift_coverage(curves)
        assert printed > 0.5 and coverage >= 0.95, (coverage, printed)
    values3, _ = mw.read_trials(three)
    coverage, printed = pi.lr_ratio_coverage(pages._curve(values3["d256_llama"]), pages._curve(values3["d128_llama"]))
    assert printed > 0.5 and coverage >= 0.95


def test_the_step_cost_interval_is_conservative_and_holds_its_estimate(pi, pages):
    t1, t2, t4 = _step_curves(pages, "none")
    for numer, denom in ((t2, t1), (t4, t2)):
        e = pi.objective_difference(numer, denom)
        assert e.low <= e.value <= e.high
        assert pi.objective_difference_coverage(numer, denom, reps=500) >= 0.95


def test_the_step_cost_coverage_check_can_fail(pi, pages):
    # Studies simulated from a curve shifted up by the interval's half-width, held to the unshifted
    # difference, miss it far more than 5% of the time.
    t1, t2, _ = _step_curves(pages, "none")
    e = pi.objective_difference(t2, t1)
    shifted = (t2[0], t2[1] + (e.high - e.low) / 2)
    (_, _, *_, lon, hin), (*_, lod, hid) = pi._simulated_optima([shifted, t1], pi.LEVEL, 500, np.random.default_rng(0))
    assert float(((lon - hid <= e.value) & (e.value <= hin - lod)).mean()) < 0.93


def test_the_transfer_drift_intervals_are_conservative_on_their_own_trials(pi, pages):
    # every (machine or parametrization, family) drift the transfer and width pages print with an
    # interval: muP on CPU and GPU, standard parametrization on CPU
    e = pages.transfer_drifts(ROOT)
    printed_sets = [key for key, d in e["drift"].items() if d.low is not None]
    assert len(printed_sets) >= 14
    for key in printed_sets:
        coverage, printed = pi.drift_coverage(e["curves"][key], reps=200, seed=1)
        assert printed > 0.5 and coverage >= 0.95, (key, coverage, printed)


def test_the_zero_readout_drift_interval_is_conservative_on_its_trials(pi, pages):
    e = pages.readout_warmup(ROOT)
    assert e["drift"].low is not None
    coverage, printed = pi.drift_coverage(e["curves"], reps=200, seed=2)
    assert printed > 0.5 and coverage >= 0.95, (coverage, printed)


def test_the_coordinate_check_slope_interval_covers_at_least_its_level(pi):
    # the one-batch check's flagged slope, over all widths, without d 64 and width pair by pair
    r = pi.coord_result(ROOT / "docs/figures/coord_check/mup_scaled_cem_attention_T1/coord_check.json")
    widths = sorted(r.settings.widths)
    for subset in (None, widths[1:], widths[:2], widths[2:]):
        coverage = pi.coord_slope_coverage(r, "blocks.1.attention", r.settings.steps - 1, subset, reps=1000, seed=4)
        assert 0.95 <= coverage <= 0.985, (subset, coverage)


def test_the_coordinate_check_slope_is_the_checks_own(pi):
    # the printed table's flagged row: -0.12 [-0.19, -0.05] at t10
    r = pi.coord_result(ROOT / "docs/figures/coord_check/mup_scaled_cem_attention_T1/coord_check.json")
    e = pi.coord_slope(r, "blocks.1.attention", 9)
    assert (round(e.value, 2), round(e.low, 2), round(e.high, 2)) == (-0.12, -0.19, -0.05)


def test_the_figure_lr_star_ratios_are_conservative_and_the_reports_lr_star_checked(pi, pages):
    fig2 = pages.report_trials(ROOT, "fig2c_attention_recursion_cpu_lr")
    fig3 = pages.report_trials(ROOT, "fig3a_full_cem_lr_cpu")
    pairs = [
        (pages._curve(fig2[f"cem_attn_T2_{p},size=tiny"]), pages._curve(fig2[f"cem_attn_T1_{p},size=tiny"]))
        for p in ("diag", "diag_lowrank")
    ]
    pairs.append((pages._curve(fig3["full_cem_T2,size=tiny"]), pages._curve(fig3["llama,size=tiny"])))
    for numer, denom in pairs:
        coverage, printed = pi.lr_ratio_coverage(numer, denom, reps=200, seed=7)
        assert printed > 0.5 and coverage >= 0.95, (coverage, printed)
    # the reports' own lr* intervals the pages quote: at their level for Fig. 2c and Llama's ...
    for curve in [pages._curve(fig2[v]) for v in fig2] + [pages._curve(fig3["llama,size=tiny"])]:
        coverage, printed = pi.lr_star_coverage(curve, reps=400, seed=7)
        assert coverage >= 0.93, coverage
    # ... and under it for full CEM's in Fig. 3a, which the page says
    coverage, _ = pi.lr_star_coverage(pages._curve(fig3["full_cem_T2,size=tiny"]), reps=400, seed=7)
    assert coverage < 0.93


def test_the_forecast_pages_drift_intervals_are_conservative(pi, pages):
    # the trusted-width (d 64 up) drifts and the 250-step recipe's; d 32-256 is the transfer table's
    sets = {k: v for k, v in pages.forecast_drift_sets(ROOT).items() if k[2][0] == 64 or k[0] == "250"}
    assert len(sets) == 7
    for key, curves in sets.items():
        coverage, printed = pi.drift_coverage(curves, reps=150, seed=8)
        assert printed > 0.5 and coverage >= 0.95, (key, coverage, printed)
