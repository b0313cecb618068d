"""scripts/pooled_variance_evidence.py (docs/results/pooled-variance.md) on the committed CPU trials."""

import numpy as np
import pytest
from scipy import stats

from tests.analysis.scripts import load_script


@pytest.fixture(scope="module")
def evidence():
    return load_script("pooled_variance_evidence")


def test_every_distinct_model_at_its_best_rate_once(evidence):
    models = evidence.models_at_best_lr(evidence.finished_trials())
    groups = [m.values for m in models]
    assert all(len(g) == 3 for g in groups)
    assert len({(m.identity, m.lr) for m in models}) == len(models)  # each model once, by what it trains
    # no two entries are one model stored twice: their seeds never agree to run-to-run noise
    for i, a in enumerate(groups):
        assert not any(np.allclose(a, b, rtol=0, atol=1e-4) for b in groups[:i])
    assert stats.levene(*groups).pvalue > 0.1  # the page's reading: no spread beyond sampling


def test_a_model_is_known_by_what_it_trains_not_by_where_it_is_stored(evidence):
    identity = evidence.model_identity
    # the same d 64 model: a width ladder's rung, a transfer study's proxy, the standard
    # parametrization's rung (at the base width muP is the standard model)
    same = {
        identity("mup_width_cpu_d32_128_mlp", "d64_cem_mlp_T1"),
        identity("transfer_cpu_first_proxy", "cem_mlp_T1@proxy"),
        identity("std_width_cpu_mlp", "d64_cem_mlp_T1"),
    }
    assert len(same) == 1
    # another width, parametrization or recipe is another model
    assert identity("std_width_cpu_mlp", "d128_cem_mlp_T1") != identity("mup_width_cpu_d32_128_mlp", "d128_cem_mlp_T1")
    assert identity("transfer_cpu_first", "llama") == identity("mup_width_cpu_d256_llama", "d256_llama")
    assert identity("mup_width_cpu_250_llama", "d64_llama") != identity("transfer_cpu_first_proxy", "llama@proxy")
    assert identity("mup_width_pilot_zero_warmup30_3seeds", "d64_llama")[0] != identity("mup_width_cpu", "d64_llama")[0]


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
