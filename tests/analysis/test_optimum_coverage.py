"""lr* and objective* intervals cover the true optimum: >= 0.90 at nominal
0.95 for n >= 3, simulated on studies like the paper's and the CPU studies.

Generative model, per simulated study: the paper's grid [5e-4 .. 8e-3] (five points,
one octave apart); a true curve in log2(lr), quadratic with a cubic skew (steeper on
one side, as perplexity rises faster towards divergence), its optimum interior at
several positions; per seed a level shift (the seed-to-seed std of ppl, 0.2-1.0 on
ppl ~13), a random tilt (moving that seed's own optimum) and per-trial noise. The
truth is the true curve's minimum over the sampled range.
"""

import math

import numpy as np
import pytest

from cem_ablate.analysis.optimum import interval_arrays
from cem_ablate.analysis.statistics import Observation, variant_stats

GRID = np.array([5e-4, 1e-3, 2e-3, 4e-3, 8e-3])
X = np.log2(GRID)
REPS = 1000

# name -> curvature, skew (cubic), level shift std, tilt std, per-trial noise std
NOISE = {
    "quiet seeds": (0.8, 0.10, 0.2, 0.10, 0.05),
    "noisy seeds": (0.5, -0.10, 1.0, 0.30, 0.30),
    "flat and tilted": (0.3, 0.05, 0.5, 0.15, 0.20),
    "skewed": (0.8, 0.20, 0.5, 0.20, 0.10),  # 4x lr above the optimum costs 4x what 4x below does
    "trial noise dominates": (0.5, 0.10, 0.2, 0.0, 0.5),
}
OPTIMA = (-10.3, -9.6, -9.0, -8.4, -7.6)  # log2 lr*: 8e-4 .. 5.2e-3, inside the grid


def true_curve(x, x0, curvature, skew):
    d = x - x0
    return 13.0 + curvature * d**2 + skew * d**3


def simulate(n, x0, noise, rng):
    curvature, skew, level, tilt, trial = noise
    shift = rng.normal(0.0, level, (REPS, n, 1))
    slope = rng.normal(0.0, tilt, (REPS, n, 1))
    values = true_curve(X, x0, curvature, skew) + shift + slope * (X - x0) + rng.normal(0.0, trial, (REPS, n, 5))
    dense = np.linspace(X[0], X[-1], 200_001)
    truth = true_curve(dense, x0, curvature, skew)
    return values, float(dense[np.argmin(truth)]), float(truth.min())


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("noise", NOISE)
def test_intervals_cover_the_true_optimum(n, noise):
    rng = np.random.default_rng(n * 10 + list(NOISE).index(noise))
    for x0 in OPTIMA:
        values, true_x, true_y = simulate(n, x0, NOISE[noise], rng)
        ex, x_lo, x_hi, ey, y_lo, y_hi = interval_arrays(GRID, values)
        printed = (ex > X[0]) & (ex < X[-1])  # no lr* interval where lr* sits on the grid's edge
        lr_coverage = float(((x_lo <= true_x) & (true_x <= x_hi))[printed].mean())
        objective_coverage = float(((y_lo <= true_y) & (true_y <= y_hi)).mean())
        assert printed.mean() > 0.5, (x0, printed.mean())
        assert lr_coverage >= 0.90, (x0, lr_coverage)
        assert objective_coverage >= 0.90, (x0, objective_coverage)


def test_the_vectorized_intervals_are_those_the_report_prints():
    # interval_arrays (the simulation above) and variant_stats (the report) agree.
    rng = np.random.default_rng(5)
    values, _, _ = simulate(4, -9.3, NOISE["noisy seeds"], rng)
    ex, x_lo, x_hi, ey, y_lo, y_hi = interval_arrays(GRID, values[:5])
    for r in range(5):
        obs = [Observation(float(lr), s, float(values[r, s, i])) for s in range(4) for i, lr in enumerate(GRID)]
        opt = variant_stats(obs).optimum
        assert math.log2(opt.lr_star) == pytest.approx(ex[r], abs=1e-9)
        assert opt.objective_star == pytest.approx(ey[r], rel=1e-12)
        assert (opt.objective_interval.low, opt.objective_interval.high) == pytest.approx((y_lo[r], y_hi[r]), rel=1e-9)
        if opt.lr_interval is not None:
            assert (math.log2(opt.lr_interval.low), math.log2(opt.lr_interval.high)) == pytest.approx(
                (x_lo[r], x_hi[r]), abs=1e-9
            )


def test_without_the_interpolation_term_the_check_fails():
    # The check can fail: a t-interval over the per-seed optima without the
    # interpolants' term misses where the grid's interpolation is biased.
    from scipy import stats

    from cem_ablate.analysis.akima import curve_minima

    rng = np.random.default_rng(0)
    values, true_x, _ = simulate(5, -7.6, (1.0, 0.15, 0.2, 0.0, 0.05), rng)
    px, _ = curve_minima(GRID, values)
    ex, _ = curve_minima(GRID, values.mean(axis=1))
    half = stats.t.ppf(0.975, 4) * px.std(axis=1, ddof=1) / math.sqrt(5)
    assert float((np.abs(ex - true_x) <= half).mean()) < 0.90
    _, x_lo, x_hi, _, _, _ = interval_arrays(GRID, values)
    assert float(((x_lo <= true_x) & (true_x <= x_hi)).mean()) >= 0.90
