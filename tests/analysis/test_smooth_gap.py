"""cem_ablate.analysis.smooth_gap: a rate's cost against the optimum on a fitted quadratic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cem_ablate.analysis.smooth_gap import smooth_gap

RATES = [2e-3, 2.38e-3, 2.74e-3, 2.83e-3, 3.12e-3, 3.36e-3, 4e-3, 4.76e-3, 5.66e-3]  # the d 256 dense grid
LR_STAR, FLOOR, CURVATURE = 3.3e-3, 4.75, 0.35


def truth(lr: float) -> float:
    return FLOOR + CURVATURE * (math.log2(lr) - math.log2(LR_STAR)) ** 2


def trials(rng: np.random.Generator | None, sd: float, per_rate=None):
    offsets = {0: -0.03, 1: 0.0, 2: 0.05}  # a seed's level, shared across rates
    out = []
    for i, lr in enumerate(RATES):
        for s in offsets:
            noise = rng.normal(0.0, sd) if rng is not None else 0.0
            extra = per_rate[i] if per_rate is not None else 0.0
            out.append((lr, s, truth(lr) + offsets[s] + extra + noise))
    return out


def test_noiseless_curve_gives_the_exact_gap_and_optimum_despite_seed_offsets():
    g = smooth_gap(trials(None, 0.0), lr=2.74e-3, centre=3.9e-3, n_boot=50)
    offset = np.mean([-0.03, 0.0, 0.05])
    assert g.lr_star == pytest.approx(LR_STAR, rel=2e-3)
    assert g.relative == pytest.approx((truth(2.74e-3) - FLOOR) / (FLOOR + offset), rel=1e-3)
    assert g.low == pytest.approx(g.relative, abs=1e-9) and g.high == pytest.approx(g.relative, abs=1e-9)
    assert g.rates == pytest.approx(RATES) and g.n == 27 and g.residual_sd < 1e-9


def test_interval_covers_the_true_gap_at_its_stated_rate_by_simulation():
    """The docstring's simulation, smaller: 9 rates x 3 seeds, noise sd 0.15 (d 256's)."""
    rng = np.random.default_rng(7)
    lr = 2.74e-3
    hits, sims = 0, 200
    for _ in range(sims):
        g = smooth_gap(trials(rng, 0.15), lr=lr, centre=3.9e-3, n_boot=300, rng=rng)
        # the seed-averaged level at the minimum is FLOOR + mean offset (0.0067)
        target = (truth(lr) - FLOOR) / (FLOOR + np.mean([-0.03, 0.0, 0.05]))
        hits += g.low <= target <= g.high
    assert 0.90 <= hits / sims <= 0.99, hits / sims


def test_lack_of_fit_flags_a_curve_no_quadratic_describes():
    rng = np.random.default_rng(3)
    zigzag = [0.3 * (-1) ** i for i in range(len(RATES))]  # shared by every seed at a rate
    rough = smooth_gap(trials(rng, 0.05, per_rate=zigzag), lr=3.12e-3, centre=3.9e-3, n_boot=50)
    smooth = smooth_gap(trials(rng, 0.05), lr=3.12e-3, centre=3.9e-3, n_boot=50)
    assert rough.lack_of_fit_p < 1e-3
    assert smooth.lack_of_fit_p > 1e-3


def test_only_rates_within_the_octaves_enter_and_too_few_or_outside_raise():
    g = smooth_gap(trials(None, 0.0), lr=3.12e-3, centre=3.12e-3, octaves=0.5, n_boot=10)
    assert min(g.rates) >= 3.12e-3 / 2**0.5 - 1e-12 and max(g.rates) <= 3.12e-3 * 2**0.5 + 1e-12
    assert len(g.rates) == 6  # 2.38e-3, 2.74e-3, 2.83e-3, 3.12e-3, 3.36e-3, 4e-3
    with pytest.raises(ValueError, match="at least 4"):
        smooth_gap(trials(None, 0.0), lr=3.12e-3, centre=3.12e-3, octaves=0.1)
    with pytest.raises(ValueError, match="outside the fitted rates"):
        smooth_gap(trials(None, 0.0), lr=8e-3, centre=3.9e-3)
