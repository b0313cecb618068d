"""Statistics over seeds, checked against independent computations (numpy, scipy.stats)."""

import math

import numpy as np
import pytest
from scipy import stats

from cem_ablate.analysis.akima import fit_akima
from cem_ablate.analysis.statistics import Observation, by_lr, nearest_lr, observations, variant_stats
from cem_ablate.config.trial_record import TrialRecord

GRID = [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]


def bowl(lr, center=2.0**-9.3, floor=20.0, curvature=1.0):
    return floor + curvature * (math.log2(lr) - math.log2(center)) ** 2


def make_obs(seeds, offset=0.0, noise=0.3, rng_seed=1, center=2.0**-9.3, grid=GRID):
    """A parabola in log2(lr) plus a per-seed shift (shared across lrs) plus small noise."""
    rng = np.random.default_rng(rng_seed)
    shift = {s: rng.normal(0, 1.0) for s in seeds}
    return [
        Observation(lr, s, bowl(lr, center) + offset + shift[s] + noise * rng.normal()) for lr in grid for s in seeds
    ]


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
    points = [
        TrialRecord(1e-3, 0, "finished", 10.0),
        TrialRecord(1e-3, 1, "diverged", None),
        TrialRecord(2e-3, 0, "finished", math.inf),
        TrialRecord(2e-3, 1, "running", None),
    ]
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


def test_interval_is_t_over_the_seeds_own_optima_plus_the_other_interpolants_gaps():
    # Recomputed independently: each seed's own Akima minimum (fit_akima on its points),
    # a t quantile with n-1 df, and the mean curve's minimum by a not-a-knot spline and
    # by modified Akima.
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
    makima = fit_akima(zip(GRID, means), method="makima")
    mx, my = math.log2(makima.lr_star), makima.ppl_star
    ex, ey = math.log2(s.optimum.lr_star), s.optimum.objective_star
    hx = q * x.std(ddof=1) / 2 + abs(ex - sx) + abs(ex - mx)
    hy = q * y.std(ddof=1) / 2 + abs(ey - sy) + abs(ey - my)
    iv = s.optimum.lr_interval
    assert math.log2(iv.low) == pytest.approx(max(ex - hx, math.log2(GRID[0])), abs=1e-9)
    assert math.log2(iv.high) == pytest.approx(min(ex + hx, math.log2(GRID[-1])), abs=1e-9)
    assert (s.optimum.objective_interval.low, s.optimum.objective_interval.high) == pytest.approx(
        (ey - hy, ey + hy), rel=1e-9
    )


def test_two_seeds_print_n_too_small_instead_of_an_interval():
    s = variant_stats(make_obs([0, 1]))
    assert s.optimum.lr_interval is None and s.optimum.objective_interval is None
    assert s.optimum.interval_note.startswith("n too small")


def test_single_seed_has_no_interval_and_a_one_point_grid_is_no_edge():
    s = variant_stats(make_obs([0]))
    assert s.optimum.lr_interval is None and s.optimum.objective_interval is None
    one = variant_stats([Observation(1e-3, 0, 7.0), Observation(1e-3, 1, 8.0)])
    assert one.optimum.edge is None and one.optimum.lr_star == 1e-3
    assert variant_stats([]).optimum is None
    monotone = variant_stats([Observation(lr, 0, 10.0 - i) for i, lr in enumerate(GRID)])
    assert monotone.optimum.edge == "high"


def test_variant_statistics_survive_a_json_round_trip():
    import json

    from cem_ablate.analysis.statistics import VariantStatistics

    for seeds in ([0, 1, 2], [0, 1]):  # with intervals, and with "n too small"
        statistics = VariantStatistics("test RMSE", variant_stats(make_obs(seeds)))
        back = VariantStatistics.from_dict(json.loads(json.dumps(statistics.to_dict())))
        assert back == statistics
    assert back.stats.optimum.interval_note.startswith("n too small")
    # stats.json written before the calibrated intervals and `study.verdicts`: the bootstrap
    # intervals and old paired Δs read back.
    old = statistics.to_dict()
    old["stats"]["optimum"].pop("interval_note")
    old["stats"]["optimum"]["lr_interval"] = {
        "low": 1e-3,
        "high": 2e-3,
        "level": 0.95,
        "method": "percentile bootstrap",
        "widened": False,
    }
    old["comparisons"] = {"llama": {"at_baseline_optimum": None, "at_own_optimum": None}}
    back = VariantStatistics.from_dict(old)
    assert back.stats.optimum.lr_interval.method == "percentile bootstrap" and back.stats.optimum.interval_note is None


def test_one_learning_rate_gives_the_t_interval_of_its_seed_mean_and_no_lr_interval():
    values = [5.0, 6.0, 8.0]
    opt = variant_stats([Observation(1e-3, s, v) for s, v in enumerate(values)]).optimum
    ci = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
    assert (opt.objective_interval.low, opt.objective_interval.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert opt.lr_interval is None and "one learning rate" in opt.interval_note


def test_nearest_grid_point_is_nearest_in_log2_lr():
    assert nearest_lr(GRID, 1.5e-3) == 2e-3  # log2: 0.415 octaves from 2e-3, 0.585 from 1e-3
    assert nearest_lr(GRID, math.sqrt(1e-3 * 2e-3)) == 1e-3  # a tie: the lower
    assert nearest_lr([], 1e-3) is None
