"""Power, false-positive rate and smallest detectable Δ of seed designs, against scipy."""

import math

import pytest
from scipy import stats

from cem_ablate.analysis.decision import Design
from cem_ablate.analysis.power import false_positive_rate, min_detectable_effect, power, simulate


def nct_power(n, d, alpha=0.05, df=None, nc=None):
    """Two-sided one-sample t-test power, written out from scipy.stats.nct."""
    df = n - 1 if df is None else df
    nc = d * math.sqrt(n) if nc is None else nc
    crit = stats.t.ppf(1 - alpha / 2, df)
    return stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc)


@pytest.mark.parametrize("n, d", [(3, 1.5), (5, 1.0), (8, 0.5)])
def test_fixed_paired_power_is_the_noncentral_t(n, d):
    assert power(Design.fixed(n), d) == pytest.approx(nct_power(n, d), abs=1e-12)
    # The simulator (what sequential designs use) runs the same test: it agrees within MC error.
    rejected, delta = simulate(Design.fixed(n), d, reps=20_000)
    assert float((rejected[:, 0] & (delta[:, 0] > 0)).mean()) == pytest.approx(nct_power(n, d), abs=0.02)


def test_welch_power_lies_between_the_noncentral_t_at_its_smallest_and_largest_df():
    # Welch's df is estimated, between n - 1 and 2n - 2 at equal n: its power is
    # simulated, and lies between the two noncentral-t powers.
    from cem_ablate.analysis.power import exact_power

    n, d = 5, 1.5
    nc = d * math.sqrt(n / 2)
    welch = power(Design.fixed(n), d, paired=False)
    assert nct_power(n, d, df=n - 1, nc=nc) - 0.01 <= welch <= nct_power(n, d, df=2 * n - 2, nc=nc) + 0.01
    assert exact_power(n, d, 0.05, paired=False) == pytest.approx(nct_power(n, d, df=2 * n - 2, nc=nc), abs=1e-12)


def test_sequential_power_lies_between_its_smallest_and_largest_fixed_design():
    # Looking at 2..5 at alpha/4 each: never better than 5 seeds at alpha, never worse
    # than 5 seeds at alpha/4 (the last look alone).
    seq = power(Design.sequential(2, 5), 1.5)
    assert nct_power(5, 1.5, alpha=0.0125) - 0.02 <= seq <= nct_power(5, 1.5) + 0.02


def test_false_positive_rate_is_deterministic_and_near_alpha_for_one_look():
    assert false_positive_rate(Design.fixed(5)) == pytest.approx(0.05, abs=2 * math.sqrt(0.05 * 0.95 / 20_000))
    assert false_positive_rate(Design.sequential(2, 5, "both")) == false_positive_rate(Design.sequential(2, 5, "both"))


@pytest.mark.parametrize("design", [Design.fixed(5), Design.sequential(2, 5), Design.sequential(3, 6, "both")])
def test_min_detectable_effect_has_the_asked_power(design):
    reps = 5000  # the product's 20,000 only make it finer; the rule is the same
    mde = min_detectable_effect(design, 0.8, reps=reps)
    assert power(design, mde, reps=reps) == pytest.approx(0.8, abs=0.01)
    assert power(design, 0.9 * mde, reps=reps) < 0.8
    assert min_detectable_effect(design, 0.8, paired=False, reps=reps) > mde  # Welch's unit is one side's std


def test_power_stays_finite_where_scipy_nct_cdf_is_nan():
    # scipy's nct.cdf(-4.30, 2, 8.57) is nan; the power is the upper tail alone there.
    from scipy import stats

    value = power(Design.fixed(3), 0.5 / 0.101)
    crit = stats.t.ppf(0.975, 2)
    assert math.isfinite(value)
    assert abs(value - stats.nct.sf(crit, 2, 0.5 / 0.101 * math.sqrt(3))) < 1e-12


@pytest.mark.parametrize("groups", [2, 8])
def test_a_pooled_design_simulated_through_the_rule_matches_the_noncentral_t(groups):
    """Fixed, pooled over `groups` points of 2 seeds: the simulation runs `decision.pooled_t`, the
    exact answer is the noncentral t with groups × 1 df; under no difference it rejects at α."""
    design = Design.fixed(2, 0.05, pooled=True)
    rejected, delta = simulate(design, 3.0, paired=False, groups=groups)
    simulated = float((rejected[:, 0] & (delta[:, 0] > 0)).mean())
    assert simulated == pytest.approx(power(design, 3.0, paired=False, groups=groups), abs=0.01)
    assert false_positive_rate(design, paired=False, groups=groups) == pytest.approx(0.05, abs=0.005)
    assert power(design, 3.0, paired=False, groups=8) > power(design, 3.0, paired=False, groups=2)
