"""study.verdicts: which comparisons a family makes (grid studies, transfer targets)."""

from __future__ import annotations

import math

from cem_ablate.analysis.decision import Design
from cem_ablate.analysis.statistics import Observation, variant_stats
from cem_ablate.study.verdicts import AT_BASELINE, AT_OPTIMA, AT_OWN, decide_family

GRID = (1e-3, 2e-3, 4e-3, 8e-3)


def grid_stats(lr_star: float, floor: float):
    return variant_stats([Observation(lr, s, floor + 0.3 * (math.log2(lr / lr_star)) ** 2 + 0.02 * s)
                          for lr in GRID for s in range(3)])


def one_rate_stats(lr: float, value: float):
    return variant_stats([Observation(lr, s, value + 0.02 * s) for s in range(3)])


def family(stats):
    return decide_family(stats, {"v": {"llama": "b"}}, {}, Design.fixed(3, 0.05), "holm")


def test_a_grid_pair_with_different_optima_makes_three_tests():
    tests = family({"v": grid_stats(2e-3, 6.0), "b": grid_stats(4e-3, 5.0)})
    assert [(t.at, t.lr_variant, t.lr_baseline) for t in tests] == [
        (AT_BASELINE, 4e-3, 4e-3), (AT_OWN, 2e-3, 2e-3), (AT_OPTIMA, 2e-3, 4e-3)]
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
