"""The width study's analysis: against scipy, and its intervals' coverage."""

import math

import numpy as np
import pytest
from scipy import stats

from cem_ablate.analysis.width_scaling import (
    WidthInput,
    energy_descent,
    fieller,
    fit_trend,
    per_seed_log_ratios,
    width_delta,
)

WIDTHS = (32, 64, 128, 192)


def _inputs(rng, a, b, sigma, seeds=3, width_sd=0.0, base=6.0):
    out = []
    for d in WIDTHS:
        x = math.log2(d / 64)
        level = a + b * x + width_sd * rng.standard_normal()
        t1 = {s: base * math.exp(0.05 * rng.standard_normal()) for s in range(seeds)}
        t2 = {s: t1[s] * math.exp(level + sigma * rng.standard_normal()) for s in range(seeds)}
        out.append(WidthInput(d, t2, t1, paired=True))
    return out


def test_slope_is_linregress_on_per_width_mean_log_ratios():
    rng = np.random.default_rng(0)
    inputs = _inputs(rng, 0.16, -0.08, 0.02)
    trend = fit_trend([width_delta(i) for i in inputs])
    x = [math.log2(i.width / 64) for i in inputs]
    y = [np.mean([math.log(i.variant[s] / i.baseline[s]) for s in i.variant]) for i in inputs]
    ref = stats.linregress(x, y)
    assert trend.b == pytest.approx(ref.slope, abs=1e-12)
    assert trend.a == pytest.approx(ref.intercept, abs=1e-12)
    assert trend.se_b == pytest.approx(ref.stderr, rel=1e-9)
    assert trend.p == pytest.approx(ref.pvalue, rel=1e-9)
    half = stats.t.ppf(0.975, 2) * ref.stderr
    assert (trend.b_low, trend.b_high) == pytest.approx((ref.slope - half, ref.slope + half), rel=1e-9)
    # balanced seeds: OLS over seed-level points gives the same slope
    xs = [math.log2(i.width / 64) for i in inputs for _ in i.variant]
    ys = [v for i in inputs for v in per_seed_log_ratios(i).values()]
    assert stats.linregress(xs, ys).slope == pytest.approx(trend.b, abs=1e-12)
    assert trend.shrinks and trend.crossing.low is not None and trend.crossing.low < trend.crossing.width


def test_per_width_delta_is_the_paired_t_on_logs():
    item = WidthInput(64, {0: 7.0, 1: 7.2, 2: 6.9}, {0: 6.0, 1: 6.3, 2: 5.8}, paired=True)
    d = width_delta(item).decision
    diffs = [math.log(item.variant[s] / item.baseline[s]) for s in range(3)]
    ref = stats.ttest_rel([math.log(v) for v in item.variant.values()], [math.log(v) for v in item.baseline.values()])
    assert d.delta == pytest.approx(np.mean(diffs), abs=1e-12)
    assert d.p == pytest.approx(ref.pvalue, rel=1e-9)


def test_fieller_interval_solves_the_band_equation():
    a, b, va, vb, cab, t = 0.16, -0.08, 0.0004, 0.0001, -0.00002, 4.3
    lo, hi = fieller(a, b, va, vb, cab, t)
    for x in (lo, hi):
        assert (a + b * x) ** 2 == pytest.approx(t * t * (va + 2 * x * cab + x * x * vb), rel=1e-9)
    assert lo < -a / b < hi
    assert fieller(a, 0.001, va, vb, cab, t) is None  # b's interval contains 0: no crossing


def test_flat_trend_prints_no_crossing():
    rng = np.random.default_rng(3)
    trend = fit_trend([width_delta(i) for i in _inputs(rng, 0.1, 0.0, 0.05)])
    if trend.b_low < 0 < trend.b_high:
        assert trend.crossing.low is None and trend.crossing.why.startswith("none")


@pytest.mark.parametrize("width_sd", [0.0, 0.02])
def test_slope_and_crossing_intervals_cover(width_sd):
    """≥ 0.90 at nominal 0.95 over 1,500 simulated studies (4 widths x 3 seeds), with and
    without a width-level departure from the line; the crossing where printed."""
    rng = np.random.default_rng(1)
    a, b = 0.16, -0.08
    true_x0 = -a / b
    n, cover_b, printed, cover_x = 1500, 0, 0, 0
    for _ in range(n):
        trend = fit_trend([width_delta(i) for i in _inputs(rng, a, b, 0.026, width_sd=width_sd)])
        cover_b += trend.b_low <= b <= trend.b_high
        if trend.crossing.low is not None:
            printed += 1
            cover_x += trend.crossing.low <= 64 * 2**true_x0 <= trend.crossing.high
    assert cover_b / n >= 0.90
    assert printed > 0.5 * n and cover_x / printed >= 0.90


def test_energy_descent_counts_second_steps():
    traces = [
        {
            "energy/blocks.0.attention/step0": 3.0,
            "energy/blocks.0.attention/step1": 2.0,
            "energy/blocks.0.attention/step2": 1.5,
            "energy/blocks.1.attention/step0": 3.0,
            "energy/blocks.1.attention/step1": 2.0,
            "energy/blocks.1.attention/step2": 2.5,
        },
        {"energy/blocks.0.attention/step0": 3.0, "energy/blocks.0.attention/step1": 2.0},
    ]  # T = 1
    assert energy_descent(traces) == (1, 2)
