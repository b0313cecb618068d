"""The decision rule against scipy.stats and a hand-computed Holm example."""

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from cem_ablate.analysis.decision import (
    BETTER,
    PAIRED_T,
    POOLED_T,
    UNRESOLVED,
    WELCH_T,
    WORSE,
    Decision,
    Design,
    adjust,
    decide,
    holm,
    pool,
)


def values(seeds, mean, rng):
    return {s: float(mean + rng.normal()) for s in seeds}


def test_a_design_counts_its_seeds_in_words():
    assert Design.fixed(1).describe().startswith("1 seed, one look")
    assert Design.fixed(3).describe().startswith("3 seeds, one look")


def test_designs_count_their_looks_and_tests():
    assert Design.fixed(5).looks == (5,) and Design.fixed(5).look_alpha() == 0.05
    seq = Design.sequential(2, 5)
    assert seq.looks == (2, 3, 4, 5) and seq.look_alpha() == pytest.approx(0.05 / 4)
    both = Design.sequential(3, 6, at="both", alpha=0.1)
    assert both.looks == (3, 4, 5, 6) and both.tests_per_look == 2 and both.look_alpha() == pytest.approx(0.1 / 8)
    assert Design.sequential(1, 3).looks == (2, 3)  # one seed tests nothing and spends no alpha
    assert Design.sequential(2, 2) == Design.fixed(2)
    for bad in (
        lambda: Design((), 1),
        lambda: Design((3, 2)),
        lambda: Design((3,), 1, 1.5),
        lambda: Design.sequential(2, 5, at="all"),
        lambda: Design.sequential(5, 3),
    ):
        with pytest.raises(ValueError):
            bad()


@pytest.mark.parametrize("design", [Design.fixed(4), Design.sequential(2, 6), Design.sequential(2, 5, "both")])
def test_paired_decision_equals_ttest_rel(design):
    rng = np.random.default_rng(0)
    v, b = values(range(6), 10.0, rng), values(range(6), 10.5, rng)
    d = decide(v, b, paired=True, design=design)
    xv, xb = [v[s] for s in range(6)], [b[s] for s in range(6)]
    ref = stats.ttest_rel(xv, xb)
    ci = ref.confidence_interval(1 - design.look_alpha())
    assert d.test == PAIRED_T and (d.n_variant, d.n_baseline, d.n_pairs) == (6, 6, 6)
    assert d.delta == pytest.approx(np.mean(np.subtract(xv, xb)), rel=1e-12)
    assert d.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (d.low, d.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert d.p_design == pytest.approx(min(1.0, ref.pvalue * design.n_tests), rel=1e-12)
    assert d.std == pytest.approx(np.std(np.subtract(xv, xb), ddof=1), rel=1e-12)


@pytest.mark.parametrize("design", [Design.fixed(3), Design.sequential(3, 6)])
def test_welch_decision_uses_every_seed_each_side_and_equals_ttest_ind(design):
    rng = np.random.default_rng(1)
    v = values([0, 1, 2], 9.0, rng)
    b = values([0, 1, 2, 3, 4], 10.0, rng) | {5: math.inf}  # a diverged seed is dropped
    d = decide(v, b, paired=False, design=design)
    ref = stats.ttest_ind(list(v.values()), [b[s] for s in range(5)], equal_var=False)
    ci = ref.confidence_interval(1 - design.look_alpha())
    assert d.test == WELCH_T and (d.n_variant, d.n_baseline, d.n_pairs) == (3, 5, 3)
    assert d.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (d.low, d.high) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_pooled_over_the_two_sides_alone_is_students_t():
    rng = np.random.default_rng(2)
    v, b = values([0, 1, 2], 9.0, rng), values([0, 1, 2, 3], 10.0, rng)
    design = Design.fixed(3, pooled=True)
    d = decide(v, b, paired=False, design=design, pooled=pool([list(v.values()), list(b.values())]))
    ref = stats.ttest_ind(list(v.values()), list(b.values()), equal_var=True)
    ci = ref.confidence_interval(1 - design.look_alpha())
    assert d.test == POOLED_T and d.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (d.low, d.high) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_the_pool_is_the_one_way_anova_within_group_mean_square():
    """Against scipy's one-way ANOVA: F = between mean square / within mean square."""
    rng = np.random.default_rng(3)
    groups = [list(rng.normal(m, 1.0, n)) for m, n in ((0, 2), (1, 3), (5, 2), (2, 4))]
    pooled = pool(groups + [[7.0], [float("nan"), 1.0]])  # one value (or one finite) adds no df
    everything = np.concatenate(groups)
    between = sum(len(g) * (np.mean(g) - everything.mean()) ** 2 for g in groups) / (len(groups) - 1)
    assert pooled.df == len(everything) - len(groups)
    assert between / pooled.variance == pytest.approx(stats.f_oneway(*groups).statistic, rel=1e-12)
    assert pool([[1.0], [2.0]]) is None


def test_a_pooled_design_decides_one_seed_per_side_and_welch_without_a_pool():
    design = Design.fixed(1, pooled=True)
    d = decide({0: 9.0}, {0: 10.0}, paired=False, design=design, pooled=pool([[9.0, 9.2], [10.0, 9.9]]))
    assert (
        d.test == POOLED_T
        and d.p is not None
        and d.std == pytest.approx(math.sqrt(pool([[9.0, 9.2], [10.0, 9.9]]).variance))
    )
    assert decide({0: 9.0, 1: 9.1}, {0: 10.0, 1: 9.8}, paired=False, design=design).test == WELCH_T
    assert (
        decide({0: 9.0, 1: 9.1}, {0: 10.0, 1: 9.8}, paired=True, design=design, pooled=pool([[1.0, 2.0]])).test
        == PAIRED_T
    )


def test_paired_uses_only_shared_finite_seeds_and_needs_two():
    d = decide({0: 1.0, 1: 2.0, 2: math.nan, 3: 4.0}, {0: 1.5, 1: 2.0, 2: 3.0}, paired=True, design=Design.fixed(3))
    assert d.n_pairs == 2 and d.n_variant == 3 and d.delta == pytest.approx(-0.25)
    one = decide({0: 1.0}, {0: 2.0, 1: 3.0}, paired=True, design=Design.fixed(2))
    assert one.delta == -1.0 and one.p is None and one.low is None and one.verdict == UNRESOLVED
    none = decide({0: 1.0}, {1: 2.0}, paired=True, design=Design.fixed(2))
    assert none.delta is None and none.n_pairs == 0
    welch_one = decide({0: 1.0}, {0: 2.0, 1: 3.0}, paired=False, design=Design.fixed(2))
    assert welch_one.p is None and welch_one.delta == pytest.approx(-1.5)


def test_verdict_sign_and_the_design_threshold():
    base = {s: 10.0 + 0.1 * s for s in range(5)}
    better = decide({s: v - 1.0 + 0.01 * (-1) ** s for s, v in base.items()}, base, paired=True, design=Design.fixed(5))
    worse = decide({s: v + 1.0 + 0.01 * (-1) ** s for s, v in base.items()}, base, paired=True, design=Design.fixed(5))
    assert better.verdict == BETTER and worse.verdict == WORSE
    # p between alpha/K and alpha: resolved with one look, unresolved under a 4-look design.
    rng = np.random.default_rng(3)
    for _ in range(1000):
        v, b = values(range(5), 0.8, rng), values(range(5), 0.0, rng)
        fixed = decide(v, b, paired=True, design=Design.fixed(5))
        if 0.0125 < fixed.p < 0.05:
            break
    assert 0.0125 < fixed.p < 0.05
    seq = Design.sequential(2, 5)
    d = decide(v, b, paired=True, design=seq)
    assert fixed.resolved
    assert not d.resolved
    assert d.low < 0 < d.high and not fixed.low < 0 < fixed.high  # the interval agrees with the verdict


def test_identical_differences_are_a_point_interval():
    d = decide({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0}, paired=True, design=Design.fixed(2))
    assert (d.delta, d.low, d.high, d.p) == (1.0, 1.0, 1.0, 0.0) and d.verdict == WORSE


def test_holm_against_a_hand_computed_example():
    # Sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max-accumulated 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2, 0.9]) == pytest.approx([0.4, 0.9]) and holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])
    base = Decision(-1.0, -2.0, -0.5, 0.0, 0.0, PAIRED_T, 3, 3, 3)
    family = [
        dataclasses.replace(base, p=p, p_design=p, delta=delta)
        for p, delta in ((0.01, -1.0), (0.04, 1.0), (0.03, -1.0), (0.005, 1.0))
    ]
    untested = Decision(None, None, None, None, None, WELCH_T, 1, 3, 0)
    out = adjust(family + [untested])
    assert [d.p_holm for d in out[:4]] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert [d.verdict for d in out] == [BETTER, UNRESOLVED, UNRESOLVED, WORSE, UNRESOLVED]
    assert out[4].p_holm is None
    none = adjust(family, correction="none")
    assert [d.p_holm for d in none] == [0.01, 0.04, 0.03, 0.005]
    assert [d.verdict for d in none] == [BETTER, WORSE, BETTER, WORSE]
    assert Decision.from_dict(out[0].to_dict()) == out[0]
