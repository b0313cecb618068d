"""Statistics over seeds, checked against independent computations (numpy, scipy.stats)."""

import math

import numpy as np
import pytest
from scipy import stats

from cem_ablate.analysis.akima import fit_akima
from cem_ablate.analysis.statistics import (
    AT_BASELINE_OPTIMUM, AT_OWN_OPTIMUM, BETTER, UNRESOLVED, WORSE, Interval, Observation, by_lr, compare,
    nearest_lr, observations, paired_delta, seeds_needed, variant_stats, verdict_of)
from cem_ablate.study.trials import TrialPoint

GRID = [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]


def bowl(lr, center=2.0**-9.3, floor=20.0, curvature=1.0):
    return floor + curvature * (math.log2(lr) - math.log2(center)) ** 2


def make_obs(seeds, offset=0.0, noise=0.3, rng_seed=1, center=2.0**-9.3, grid=GRID):
    """A parabola in log2(lr) plus a per-seed shift (shared across lrs) plus small noise."""
    rng = np.random.default_rng(rng_seed)
    shift = {s: rng.normal(0, 1.0) for s in seeds}
    return [Observation(lr, s, bowl(lr, center) + offset + shift[s] + noise * rng.normal())
            for lr in grid for s in seeds]


def test_mean_std_n_per_lr_match_numpy_by_hand():
    obs = make_obs([0, 1, 2, 3])
    rows = by_lr(obs)
    assert [r.lr for r in rows] == GRID
    for row in rows:
        values = [o.value for o in obs if o.lr == row.lr]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        assert row.n == 4 and row.seeds == (0, 1, 2, 3)
        assert row.mean == pytest.approx(mean, rel=1e-12)
        assert row.std == pytest.approx(std, rel=1e-12)
        assert isinstance(row.mean, float) and isinstance(row.std, float)
    single = by_lr([Observation(1e-3, 0, 5.0)])[0]
    assert single.std is None and single.mean == 5.0


def test_observations_keep_only_finished_finite_trials():
    points = [TrialPoint(0, "a", 1e-3, 0, "finished", 10.0), TrialPoint(1, "b", 1e-3, 1, "diverged", None),
              TrialPoint(2, "c", 2e-3, 0, "finished", math.inf), TrialPoint(3, "d", 2e-3, 1, "running", None)]
    assert observations(points) == [Observation(1e-3, 0, 10.0)]


def test_optimum_is_the_akima_fit_of_seed_means_with_an_interval_around_it():
    obs = make_obs([0, 1, 2, 3, 4])
    s = variant_stats(obs)
    means = [(lr, np.mean([o.value for o in obs if o.lr == lr])) for lr in GRID]
    fit = fit_akima(means)
    assert s.optimum.lr_star == pytest.approx(fit.lr_star, rel=1e-12)
    assert s.optimum.objective_star == pytest.approx(fit.ppl_star, rel=1e-12)
    assert s.optimum.n_seeds == 5 and s.optimum.edge is None and s.optimum.interval_note is None
    lo, hi = s.optimum.lr_interval, s.optimum.objective_interval
    assert lo.contains(s.optimum.lr_star) and lo.low < lo.high and lo.level == 0.95
    assert hi.contains(s.optimum.objective_star) and hi.low < hi.high
    assert 1e-3 < lo.low and lo.high < 4e-3  # a clear bowl: lr* stays between the neighbours of its minimum
    assert variant_stats(obs) == s  # deterministic: the same trials give the same intervals


def test_interval_is_t_over_the_seeds_own_optima_plus_the_akima_spline_gap():
    # Recomputed independently: each seed's own Akima minimum (fit_akima on its points),
    # a t quantile with n-1 df, and the not-a-knot spline's minimum of the mean curve.
    from scipy.interpolate import CubicSpline

    seeds = [0, 1, 2, 3]
    obs = make_obs(seeds, noise=0.4, rng_seed=5)
    s = variant_stats(obs)
    own = [fit_akima((o.lr, o.value) for o in obs if o.seed == k) for k in seeds]
    x, y = np.log2([f.lr_star for f in own]), np.asarray([f.ppl_star for f in own])
    q = stats.t.ppf(0.975, len(seeds) - 1)
    means = [np.mean([o.value for o in obs if o.lr == lr]) for lr in GRID]
    dense = np.linspace(math.log2(GRID[0]), math.log2(GRID[-1]), 2001)
    spline = CubicSpline(np.log2(GRID), means)(dense)
    sx, sy = dense[np.argmin(spline)], spline.min()
    ex, ey = math.log2(s.optimum.lr_star), s.optimum.objective_star
    hx = q * x.std(ddof=1) / 2 + abs(ex - sx)
    hy = q * y.std(ddof=1) / 2 + abs(ey - sy)
    iv = s.optimum.lr_interval
    assert math.log2(iv.low) == pytest.approx(max(ex - hx, math.log2(GRID[0])), abs=1e-9)
    assert math.log2(iv.high) == pytest.approx(min(ex + hx, math.log2(GRID[-1])), abs=1e-9)
    assert (s.optimum.objective_interval.low, s.optimum.objective_interval.high) == pytest.approx(
        (ey - hy, ey + hy), rel=1e-9)


def test_two_seeds_print_n_too_small_instead_of_an_interval():
    s = variant_stats(make_obs([0, 1]))
    assert s.optimum.lr_interval is None and s.optimum.objective_interval is None
    assert s.optimum.interval_note.startswith("n too small")


def test_single_seed_has_no_interval_and_a_one_point_grid_is_no_edge():
    s = variant_stats(make_obs([0]))
    assert s.optimum.lr_interval is None and s.optimum.objective_interval is None
    one = variant_stats([Observation(1e-3, 0, 7.0), Observation(1e-3, 1, 8.0)], n_resamples=200)
    assert one.optimum.edge is None and one.optimum.lr_star == 1e-3
    assert variant_stats([]).optimum is None
    monotone = variant_stats([Observation(lr, 0, 10.0 - i) for i, lr in enumerate(GRID)])
    assert monotone.optimum.edge == "high"


def test_paired_delta_equals_ttest_rel_and_verdicts_follow_the_interval():
    seeds = [0, 1, 2, 3]
    base = make_obs(seeds)
    for offset, expected in ((-2.0, BETTER), (2.0, WORSE), (0.01, UNRESOLVED)):
        var = make_obs(seeds, offset=offset, rng_seed=1, noise=0.3)
        var = [Observation(o.lr, o.seed, o.value + 0.2 * np.sin(7 * o.seed + o.lr * 1e3)) for o in var]
        bs, vs = variant_stats(base, n_resamples=200), variant_stats(var, n_resamples=200)
        c = compare(vs, bs)
        d = c.at_baseline_optimum
        assert d.at == AT_BASELINE_OPTIMUM
        assert d.lr == nearest_lr(GRID, bs.optimum.lr_star)
        xv = [next(o.value for o in var if o.lr == d.lr and o.seed == s) for s in seeds]
        xb = [next(o.value for o in base if o.lr == d.lr and o.seed == s) for s in seeds]
        ref = stats.ttest_rel(xv, xb)
        ci = ref.confidence_interval(0.95)
        diffs = np.subtract(xv, xb)
        assert d.delta == pytest.approx(diffs.mean(), rel=1e-12)
        assert d.std == pytest.approx(diffs.std(ddof=1), rel=1e-12)
        assert (d.interval.low, d.interval.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
        assert d.p_value == pytest.approx(ref.pvalue, rel=1e-12)
        assert d.verdict == expected and c.verdict == expected
        assert c.at_own_optimum.at == AT_OWN_OPTIMUM
        assert c.at_own_optimum.lr == nearest_lr(GRID, vs.optimum.lr_star)


def test_pairs_only_seeds_finished_by_both():
    base = [Observation(1e-3, s, 10.0 + s) for s in (0, 1, 2)]
    var = [Observation(1e-3, s, 9.0 + s + 0.1 * s * s) for s in (1, 2, 3)]
    d = paired_delta(by_lr(var)[0], by_lr(base)[0], AT_BASELINE_OPTIMUM, 1e-3)
    assert d.seeds == (1, 2) and d.n == 2
    assert d.delta == pytest.approx(np.mean([-1 + 0.1, -1 + 0.4]))
    none = paired_delta(None, by_lr(base)[0], AT_BASELINE_OPTIMUM, 1e-3)
    assert none.n == 0 and none.delta is None and none.verdict == UNRESOLVED
    one = paired_delta(by_lr(var[:1])[0], by_lr(base)[0], AT_BASELINE_OPTIMUM, 1e-3)
    assert one.n == 1 and one.interval is None and one.verdict == UNRESOLVED


def test_verdict_flips_with_the_sign_and_the_spread():
    assert verdict_of(Interval(-2.0, -0.1)) == BETTER
    assert verdict_of(Interval(0.1, 2.0)) == WORSE
    assert verdict_of(Interval(-0.1, 0.1)) == UNRESOLVED
    assert verdict_of(None) == UNRESOLVED
    tight = [Observation(1e-3, s, 10.0 + s) for s in range(4)]
    shifted = [Observation(1e-3, s, 10.0 + s - 0.5 + 0.01 * (-1) ** s) for s in range(4)]
    noisy = [Observation(1e-3, s, 10.0 + s - 0.5 + 2.0 * (-1) ** s) for s in range(4)]
    assert paired_delta(by_lr(shifted)[0], by_lr(tight)[0], "x", 1e-3).verdict == BETTER
    assert paired_delta(by_lr(noisy)[0], by_lr(tight)[0], "x", 1e-3).verdict == UNRESOLVED


def test_seeds_needed_is_the_smallest_n_whose_t_half_width_is_below_delta():
    for delta, std in ((0.5, 1.0), (0.1, 0.3), (2.0, 0.5), (-0.7, 1.3)):
        n = seeds_needed(delta, std)
        half = lambda k: stats.t.ppf(0.975, k - 1) * std / math.sqrt(k)  # noqa: E731
        assert half(n) < abs(delta)
        assert n == 2 or half(n - 1) >= abs(delta)
    # Large-n limit: the normal approximation n ~ (1.96 sd / Δ)^2.
    assert seeds_needed(0.01, 1.0) == pytest.approx((1.959964 / 0.01) ** 2, rel=0.01)
    assert seeds_needed(0.5, 1.0) < seeds_needed(0.25, 1.0)  # a smaller effect needs more seeds
    assert seeds_needed(0.0, 1.0) is None
    assert seeds_needed(1.0, 0.0) == 2


def test_a_resolved_delta_needs_no_more_seeds_than_it_has():
    base = [Observation(1e-3, s, 10.0 + s) for s in range(5)]
    var = [Observation(1e-3, s, 9.0 + s + 0.05 * (-1) ** s) for s in range(5)]
    d = paired_delta(by_lr(var)[0], by_lr(base)[0], "x", 1e-3)
    assert d.verdict == BETTER and d.seeds_needed <= d.n


def test_variant_statistics_survive_a_json_round_trip():
    import json

    from cem_ablate.analysis.statistics import VariantStatistics

    base = make_obs([0, 1, 2])
    var = [Observation(o.lr, o.seed, o.value - 1.0) for o in make_obs([0, 1, 2], rng_seed=2)]
    bs, vs = variant_stats(base, n_resamples=100), variant_stats(var, n_resamples=100)
    stats = VariantStatistics("test RMSE", vs, {"llama": compare(vs, bs)})
    back = VariantStatistics.from_dict(json.loads(json.dumps(stats.to_dict())))
    assert back == stats and back.comparisons["llama"].at_baseline_optimum.interval is not None


def test_delta_of_optima_is_welch_at_each_ones_best_grid_point():
    # The variant is best at 4e-3, the baseline at 2e-3: the Δ of the optima compares
    # those two grid points, unpaired (Welch), and equals scipy's on the same values.
    from scipy.stats import ttest_ind

    from cem_ablate.analysis.statistics import delta_of_optima

    grid = (1e-3, 2e-3, 4e-3)
    base = [Observation(lr, s, 10 + (lr * 1e3 - 2) ** 2 + 0.1 * s) for lr in grid for s in range(4)]
    var = [Observation(lr, s, 9.5 + 0.5 * (lr * 1e3 - 4) ** 2 + 0.13 * ((s * 7) % 4)) for lr in grid for s in range(3)]
    b, v = variant_stats(base, n_resamples=0), variant_stats(var, n_resamples=0)
    d = delta_of_optima(v, b)
    assert (d.variant_lr, d.baseline_lr, d.n_variant, d.n_baseline) == (4e-3, 2e-3, 3, 4)
    xv = [o.value for o in var if o.lr == 4e-3]
    xb = [o.value for o in base if o.lr == 2e-3]
    ref = ttest_ind(xv, xb, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert d.delta == pytest.approx(np.mean(xv) - np.mean(xb), rel=1e-12)
    assert (d.interval.low, d.interval.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-12) and d.verdict == "better"
    one = variant_stats([o for o in var if o.seed == 0], n_resamples=0)
    assert delta_of_optima(one, b).interval is None and delta_of_optima(one, b).verdict == "unresolved"


def test_one_learning_rate_gives_the_t_interval_of_its_seed_mean_and_no_lr_interval():
    values = [5.0, 6.0, 8.0]
    opt = variant_stats([Observation(1e-3, s, v) for s, v in enumerate(values)]).optimum
    ci = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
    assert (opt.objective_interval.low, opt.objective_interval.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert opt.lr_interval is None and "one learning rate" in opt.interval_note
