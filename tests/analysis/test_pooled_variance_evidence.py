"""scripts/pooled_variance_evidence.py (docs/results/pooled-variance.md) on the committed CPU trials."""

import numpy as np
import pytest
from scipy import stats

from tests.analysis.scripts import load_script


@pytest.fixture(scope="module")
def evidence():
    return load_script("pooled_variance_evidence")


def test_every_distinct_model_at_its_best_rate_once(evidence):
    groups = evidence.models_at_best_lr(evidence.finished_trials())
    assert len(groups) == 46 and all(len(g) == 3 for g in groups)  # the page's count
    assert len({tuple(np.round(g, 5)) for g in groups}) == len(groups)  # a reused trial counts once
    assert stats.levene(*groups).pvalue > 0.1  # the page's reading: no spread beyond sampling


def test_the_spread_bound_is_found_by_simulation_and_holds_the_moments_estimate(evidence):
    rng = np.random.default_rng(0)
    homogeneous = [rng.normal(0, 1, 3) for _ in range(46)]
    spread = [rng.normal(0, np.exp(rng.normal(0, 1.5) / 2), 3) for _ in range(46)]
    tau_h, upper_h = evidence.tau_squared(homogeneous)
    tau_s, upper_s = evidence.tau_squared(spread)
    assert tau_h <= upper_h and tau_s <= upper_s
    assert upper_s > upper_h  # a real spread of the variances raises the bound


def test_the_simulation_rejects_at_the_designs_rates(evidence, monkeypatch):
    monkeypatch.setattr(evidence, "REPS", 8000)
    rng = np.random.default_rng(1)
    pooled, welch = evidence.simulate(8, 0.0, 0.0, rng)
    assert pooled == pytest.approx(0.034, abs=0.006) and welch == pytest.approx(0.034, abs=0.006)
    pooled, welch = evidence.simulate(8, 0.0, evidence.DELTA, rng)
    assert pooled == pytest.approx(0.812, abs=0.02) and welch == pytest.approx(0.80, abs=0.02)
