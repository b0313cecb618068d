"""study.verdicts: which comparisons a family makes (grid studies, transfer targets)."""

from __future__ import annotations

import math

import pytest

from cem_ablate.analysis.decision import Design
from cem_ablate.analysis.statistics import Observation, variant_stats
from cem_ablate.study.verdicts import AT_BASELINE, AT_OPTIMA, AT_OWN, decide_family

GRID = (1e-3, 2e-3, 4e-3, 8e-3)


def grid_stats(lr_star: float, floor: float):
    return variant_stats(
        [Observation(lr, s, floor + 0.3 * (math.log2(lr / lr_star)) ** 2 + 0.02 * s) for lr in GRID for s in range(3)]
    )


def one_rate_stats(lr: float, value: float):
    return variant_stats([Observation(lr, s, value + 0.02 * s) for s in range(3)])


def family(stats):
    return decide_family(stats, {"v": {"llama": "b"}}, {}, Design.fixed(3, 0.05), "holm")


def test_a_grid_pair_with_different_optima_makes_three_tests():
    tests = family({"v": grid_stats(2e-3, 6.0), "b": grid_stats(4e-3, 5.0)})
    assert [(t.at, t.lr_variant, t.lr_baseline) for t in tests] == [
        (AT_BASELINE, 4e-3, 4e-3),
        (AT_OWN, 2e-3, 2e-3),
        (AT_OPTIMA, 2e-3, 4e-3),
    ]
    assert all(t.decision.n_variant == 3 and t.decision.n_baseline == 3 for t in tests)


def test_transfer_targets_are_compared_at_their_own_rates_only():
    # each trained at its proxy's lr* alone: only "tuned vs tuned" has seeds on both sides
    tests = family({"v": one_rate_stats(2e-3, 6.0), "b": one_rate_stats(4e-3, 5.0)})
    assert [(t.at, t.lr_variant, t.lr_baseline) for t in tests] == [(AT_OPTIMA, 2e-3, 4e-3)]
    (test,) = tests
    assert test.decision.verdict == "worse" and test.decision.p_holm == test.decision.p_design


def test_targets_at_one_shared_rate_make_one_test():
    tests = family({"v": one_rate_stats(2e-3, 6.0), "b": one_rate_stats(2e-3, 5.0)})
    assert [(t.at, t.lr_variant, t.lr_baseline) for t in tests] == [(AT_BASELINE, 2e-3, 2e-3)]


def test_a_target_against_a_grid_baseline_is_tested_at_its_rate():
    # a one-rate variant against a full-grid baseline: at the variant's rate (own lr*) and
    # against the baseline's optimum; never at a rate the variant did not train
    tests = family({"v": one_rate_stats(2e-3, 6.0), "b": grid_stats(4e-3, 5.0)})
    assert [(t.at, t.lr_variant, t.lr_baseline) for t in tests] == [(AT_OWN, 2e-3, 2e-3), (AT_OPTIMA, 2e-3, 4e-3)]


def test_a_pooled_family_takes_one_variance_from_every_point_it_compares():
    """Three transfer targets against one baseline, 2 seeds each: every test's spread is the
    within-point mean square over the four points (4 x 1 df), not
    its own two sides', and each point counts once however many tests share it."""
    from cem_ablate.analysis.decision import POOLED_T, pool

    values = {"b": (5.0, 5.1), "v1": (5.3, 5.5), "v2": (6.0, 6.02), "v3": (4.0, 4.4)}
    stats = {
        k: variant_stats([Observation(2e-3 if k == "b" else 1e-3, s, x) for s, x in enumerate(v)])
        for k, v in values.items()
    }
    tests = decide_family(
        stats, {k: {"llama": "b"} for k in ("v1", "v2", "v3")}, {}, Design.fixed(2, 0.05, pooled=True), "holm"
    )
    expected = pool(list(values.values()))
    assert expected.df == 4 and len(tests) == 3
    for t in tests:
        assert t.decision.test == POOLED_T and t.decision.std == math.sqrt(expected.variance)
        own = values[t.variant]
        half = (t.decision.high - t.decision.low) / 2
        assert half == pytest.approx(stats_t(0.975, 4) * math.sqrt(expected.variance))
        assert t.decision.delta == pytest.approx(sum(own) / 2 - 5.05)
    welch = decide_family(stats, {"v1": {"llama": "b"}}, {}, Design.fixed(2, 0.05), "holm")
    assert welch[0].decision.test == "Welch t"


def stats_t(q: float, df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))
