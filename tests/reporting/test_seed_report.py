"""Numbers as the report writes them: Δ and its interval share one rounding."""

from cem_ablate.analysis.decision import Decision
from cem_ablate.reporting.seed_report import decimals, decision_delta_text


def decision(delta, low=None, high=None):
    return Decision(
        delta=delta,
        low=low,
        high=high,
        p=0.01,
        p_design=0.01,
        test="paired t",
        n_variant=3,
        n_baseline=3,
        n_pairs=3,
        p_holm=0.02,
        verdict="better",
        level=0.95 if low is not None else None,
    )


def test_delta_and_interval_share_their_decimals():
    assert decision_delta_text(decision(2.17634, 1.9996, 2.3541)) == "+2.176 [+2.000, +2.354]"  # not [+2, +2.35]
    assert decision_delta_text(decision(-0.148936, -0.41, 0.112)) == "-0.1489 [-0.4100, +0.1120]"
    assert decision_delta_text(decision(0.0012, -0.5, 0.5)) == "+0.0012 [-0.5000, +0.5000]"  # by the largest
    assert decision_delta_text(decision(12.5349)) == "+12.53 (n too small)"
    assert decimals(0.0) == 4 and decimals(1234.5) == 0
