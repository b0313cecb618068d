"""The decision rule is calibrated: simulated null comparisons, Holm families and the
coverage of the Δ intervals.

The simulations here are independent of `analysis.power`'s simulator: scipy.stats'
t-tests vectorized over thousands of simulated comparisons, thresholded at the
design's `look_alpha`; a sample of the same data is run through `decide` itself to
show it is the same rule. Each false-positive rate must be <= 0.05 + 2 standard
errors; every interval the report prints must cover >= 0.90 at nominal 0.95.
"""

import math

import numpy as np
import pytest
from scipy import stats

from cem_ablate.analysis.decision import UNRESOLVED, Decision, Design, adjust, decide
from cem_ablate.analysis.power import false_positive_rate

REPS = 4000
ALPHA = 0.05
BOUND = ALPHA + 2.0 * math.sqrt(ALPHA * (1 - ALPHA) / REPS)
DECIDE_SAMPLE = 50  # comparisons also run through `decide`, one by one

DESIGNS = {
    "fixed 3": Design.fixed(3),
    "fixed 5": Design.fixed(5),
    "sequential 2..5": Design.sequential(2, 5),
    "sequential 3..6": Design.sequential(3, 6),
    "sequential 2..5 at both": Design.sequential(2, 5, "both"),
    "sequential 3..6 at both": Design.sequential(3, 6, "both"),
}


def correlated(rng, design, rho):
    """(REPS, tests per look, max seeds) standard normals; the tests of one look (two
    grid points of one seed) correlated rho."""
    shape = (REPS, design.tests_per_look, max(design.looks))
    common = rng.standard_normal((REPS, 1, shape[2]))
    return math.sqrt(rho) * common + math.sqrt(1 - rho) * rng.standard_normal(shape)


def p_values(design, n, paired, a, b):
    if paired:
        return stats.ttest_1samp(a[..., :n], 0.0, axis=-1).pvalue
    return stats.ttest_ind(a[..., :n], b[..., :n], equal_var=False, axis=-1).pvalue


def null_rate(design, paired, rng, rho=0.5, ratio=1.0):
    """Share of null comparisons with any verdict at any look of any test (an upper
    bound of the rate under the seeds' stop-when-resolved rule)."""
    a = correlated(rng, design, rho)
    b = ratio * correlated(rng, design, rho)  # Welch: the baseline's seeds, std `ratio`
    if paired:
        a = a - b  # the per-seed differences
    flagged = np.zeros(REPS, dtype=bool)
    for n in design.testing_looks:
        p = p_values(design, n, paired, a, b)
        flagged |= (p <= design.look_alpha()).any(axis=1)
        # `decide` draws the same verdicts on the same data (p at the design's threshold).
        for r in range(DECIDE_SAMPLE):
            for t in range(design.tests_per_look):
                if paired:
                    d = decide(
                        {s: a[r, t, s] for s in range(n)}, dict.fromkeys(range(n), 0.0), paired=True, design=design
                    )
                else:
                    d = decide(
                        {s: a[r, t, s] for s in range(n)},
                        {s: b[r, t, s] for s in range(n)},
                        paired=False,
                        design=design,
                    )
                assert d.p == pytest.approx(p[r, t], rel=1e-9, abs=1e-15)
                assert d.resolved == (p[r, t] <= design.look_alpha())
    return float(flagged.mean())


@pytest.mark.parametrize("name", DESIGNS)
@pytest.mark.parametrize("paired", [True, False], ids=["paired", "welch"])
def test_false_positive_rate_is_at_most_alpha(name, paired):
    design = DESIGNS[name]
    rng = np.random.default_rng(list(DESIGNS).index(name) * 2 + paired)
    assert null_rate(design, paired, rng) <= BOUND
    # The product's simulator (the dry run, `cem-ablate power`) agrees.
    assert false_positive_rate(design, paired=paired, reps=REPS) <= BOUND


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_at_both_is_calibrated_whatever_the_correlation_of_its_grid_points(rho):
    design = DESIGNS["sequential 2..5 at both"]
    assert null_rate(design, True, np.random.default_rng(7), rho=rho) <= BOUND
    assert false_positive_rate(design, paired=True, reps=REPS, rho=rho) <= BOUND


def test_welch_is_calibrated_with_unequal_spreads():
    assert null_rate(Design.fixed(3), False, np.random.default_rng(8), ratio=3.0) <= BOUND
    assert null_rate(Design.sequential(2, 5), False, np.random.default_rng(9), ratio=3.0) <= BOUND


def test_holm_controls_the_family_wise_rate_of_a_report():
    # A report of 12 comparisons (3 seeds each, paired), 10 with no true difference and
    # 2 with a large one: a false verdict among the 10 in at most 5% of reports.
    rng = np.random.default_rng(11)
    design = Design.fixed(3)
    effects = np.array([0.0] * 10 + [4.0, 4.0])
    diffs = effects[None, :, None] + rng.standard_normal((REPS, len(effects), 3))
    p = stats.ttest_1samp(diffs, 0.0, axis=-1).pvalue
    mean = diffs.mean(axis=-1)
    false_family = 0
    for r in range(REPS):
        family = [
            Decision(float(mean[r, i]), None, None, float(p[r, i]), float(p[r, i]), "paired t", 3, 3, 3)
            for i in range(len(effects))
        ]
        verdicts = [d.verdict for d in adjust(family, alpha=design.alpha)]
        false_family += any(v != UNRESOLVED for v in verdicts[:10])
    assert false_family / REPS <= BOUND
    # Without the correction the same reports err far more often: the test can fail.
    unadjusted = float((p[:, :10] <= ALPHA).any(axis=1).mean())
    assert unadjusted > 0.3


def coverage_of_delta(design, paired, rng, delta=0.7, ratio=1.0):
    """Seeds added while unresolved (the sequential rule), then the interval printed at
    the last look: the share that covers the true Δ."""
    a = delta + correlated(rng, design, 0.5)[:, 0]
    b = ratio * correlated(rng, design, 0.5)[:, 0]
    if paired:
        a = a - b
    done = np.zeros(REPS, dtype=bool)
    covered = np.zeros(REPS, dtype=bool)
    level = 1 - design.look_alpha()
    for n in design.testing_looks:
        if paired:
            result = stats.ttest_1samp(a[:, :n], 0.0, axis=-1)
        else:
            result = stats.ttest_ind(a[:, :n], b[:, :n], equal_var=False, axis=-1)
        ci = result.confidence_interval(level)
        going = ~done
        covered[going] = ((ci.low <= delta) & (delta <= ci.high))[going]
        for r in range(20):  # the interval `decide` prints is this one
            d = decide(
                {s: a[r, s] for s in range(n)},
                {s: 0.0 if paired else b[r, s] for s in range(n)},
                paired=paired,
                design=design,
            )
            assert (d.low, d.high) == pytest.approx((ci.low[r], ci.high[r]), rel=1e-9)
        done |= result.pvalue <= design.look_alpha()
    return float(covered.mean())


@pytest.mark.parametrize("name", ["fixed 3", "fixed 5", "sequential 2..5", "sequential 3..6"])
def test_paired_delta_interval_covers(name):
    assert coverage_of_delta(DESIGNS[name], True, np.random.default_rng(21)) >= 0.90


@pytest.mark.parametrize("ratio", [1.0, 3.0])
@pytest.mark.parametrize("name", ["fixed 3", "fixed 5", "sequential 2..5"])
def test_welch_interval_covers(name, ratio):
    assert coverage_of_delta(DESIGNS[name], False, np.random.default_rng(22), ratio=ratio) >= 0.90


@pytest.mark.parametrize("points, seeds", [(8, 2), (3, 2), (6, 3)])
def test_a_pooled_variance_is_calibrated_and_its_interval_covers(points, seeds):
    """`statistics.variance: pooled`: `points` models of `seeds` seeds at one variance, the
    first against the second; the within-point mean square written out here (N − k df)."""
    from cem_ablate.analysis.decision import pool

    rng = np.random.default_rng(31 + points)
    delta = 0.7
    x = rng.standard_normal((REPS, points, seeds))
    x[:, 0] += delta
    design = Design.fixed(seeds, pooled=True)
    df = points * (seeds - 1)
    msw = ((x - x.mean(axis=-1, keepdims=True)) ** 2).sum(axis=(1, 2)) / df
    se = np.sqrt(msw * 2 / seeds)
    est = x[:, 0].mean(-1) - x[:, 1].mean(-1)
    half = stats.t.ppf(0.975, df) * se
    assert float(((est - half <= delta) & (delta <= est + half)).mean()) >= 0.93
    null = x[:, 2].mean(-1) - x[:, 1].mean(-1) if points > 2 else None
    if null is not None:
        p = 2 * stats.t.sf(np.abs(null) / se, df)
        assert float((p <= ALPHA).mean()) <= BOUND
    for r in range(DECIDE_SAMPLE):  # `decide` with the family's pool draws this interval
        d = decide(
            {s: x[r, 0, s] for s in range(seeds)},
            {s: x[r, 1, s] for s in range(seeds)},
            paired=False,
            design=design,
            pooled=pool(list(x[r])),
        )
        assert (d.low, d.high) == pytest.approx((est[r] - half[r], est[r] + half[r]), rel=1e-9)
