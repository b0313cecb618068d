"""scripts/forecast_evidence.py's bias interval (docs/results/forecast.md): the mean error of a
ladder's forecasts over its families, checked by simulation on ladders drawn from a known law
(tests/analysis/test_forecast.py's), in float64."""

from __future__ import annotations

import numpy as np
import pytest

from cem_ablate.analysis.forecast import fit_ladders
from tests.analysis.scripts import load_script
from tests.analysis.test_forecast import FAMILIES, TARGET, params, simulate


@pytest.fixture(scope="module")
def evidence():
    return load_script("forecast_evidence")


def _bias(evidence, rng, shift: float = 0.0):
    ladders, measured = simulate(rng, floors=False)
    fit = fit_ladders(ladders, "power_shared")
    return evidence.forecast_bias(
        fit, {k: params(TARGET) for k in FAMILIES}, {k: v - shift for k, v in measured.items()}, 0.90
    )


def test_the_90_percent_bias_interval_covers_a_true_zero_about_90_percent(evidence):
    rng = np.random.default_rng(11)
    hits = [(b.low <= 0.0 <= b.high) for b in (_bias(evidence, rng) for _ in range(400))]
    # binomial sd of a 90% rate over 400 draws: 0.015
    assert 0.85 <= np.mean(hits) <= 0.95


def test_a_real_bias_is_found_and_its_sign_resolved(evidence):
    rng = np.random.default_rng(12)
    # every target measured 0.1 higher in log than the law: the forecasts run low by 0.1
    biases = [_bias(evidence, rng, shift=-0.1) for _ in range(100)]
    assert np.mean([b.mean for b in biases]) == pytest.approx(-0.1, abs=0.01)
    assert np.mean([b.high < 0 for b in biases]) > 0.9
    assert np.mean([b.low <= -0.1 <= b.high for b in biases]) > 0.84
