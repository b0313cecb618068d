"""Table 3's draws as the unit (docs/design/experiments.md#s9-gaussian-process-study): intervals over draws, the exact-GP floor."""

import math

import numpy as np
import pytest
from scipy import stats

from cem_ablate.analysis.gp_draws import DepthDraws, posterior_rmse, summarize_depth, t_interval, versus_shallow


def test_pooled_interval_is_over_draw_means_and_verdict_is_paired_over_draws():
    t1 = DepthDraws(1, {0: {0: 0.52, 1: 0.53, 2: 0.51}, 1: {0: 0.60, 1: 0.61}, 2: {0: 0.55, 1: 0.56, 2: 0.54}})
    t4 = DepthDraws(4, {0: {0: 0.49, 1: 0.50, 2: 0.48}, 1: {0: 0.58, 1: 0.57}, 2: {0: 0.53, 1: 0.53, 2: 0.52}})
    s = summarize_depth(t4)
    means = [np.mean(list(v.values())) for v in t4.by_draw.values()]
    ref = stats.t.interval(0.95, 2, loc=np.mean(means), scale=stats.sem(means))
    assert (s.pooled.low, s.pooled.high) == pytest.approx(ref, rel=1e-9) and s.pooled.n == 3
    assert s.per_draw[1].n == 2
    d = versus_shallow(t4, t1)
    base = [np.mean(list(v.values())) for v in t1.by_draw.values()]
    assert d.p == pytest.approx(stats.ttest_rel(means, base).pvalue, rel=1e-9) and d.n_pairs == 3


def test_t_interval_covers():
    rng = np.random.default_rng(0)
    hits, n = 0, 4000
    for _ in range(n):
        iv = t_interval(list(rng.normal(1.0, 0.3, 3)))
        hits += iv.low <= 1.0 <= iv.high
    assert hits / n >= 0.90


def test_posterior_mean_matches_a_direct_solve():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (60, 2))
    k = np.exp(-((x[:, None] - x[None]) ** 2).sum(-1) / 2)
    f = np.linalg.cholesky(k + 1e-9 * np.eye(60)) @ rng.standard_normal(60)
    y = f + 0.05 * rng.standard_normal(60)
    got = posterior_rmse(k[:40, :40], k[40:, :40], y[:40], y[40:], 0.05**2)
    mean = k[40:, :40] @ np.linalg.solve(k[:40, :40] + 0.0025 * np.eye(40), y[:40])
    assert got == pytest.approx(math.sqrt(np.mean((mean - y[40:]) ** 2)), rel=1e-9)
    assert got < float(np.sqrt(np.mean(y[40:] ** 2)))  # beats predicting 0
