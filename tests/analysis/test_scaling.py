"""Scaling summary: power laws per family and parameter/compute-equivalent multipliers."""

import math

import numpy as np
import pytest

from cem_ablate.analysis.scaling import (
    FLOPS,
    LOG_LOG,
    PARAMS,
    SATURATING,
    ScalingInput,
    fit_power_law,
    has_size_axis,
    summarize_scaling,
)
from cem_ablate.analysis.statistics import Observation, variant_stats

SIZES = [2e6, 4e6, 8e6, 16e6]
TOKENS = 1e8


def law(n, a=10.0, b=0.3, c=2.0):
    return a * (n / 1e6) ** (-b) + c


def inputs(seeds=(0,), ratio=0.85, sizes=SIZES, spread=0.0):
    """llama on the law; cem with n params reaches llama's objective at n / ratio params."""
    out = []
    for n in sizes:
        for family, objective in (("llama", law(n)), ("cem", law(n / ratio))):
            # per-seed offsets summing to zero: the seed mean is exactly `objective`
            offsets = np.linspace(-spread, spread, len(seeds)) if len(seeds) > 1 else [0.0]
            obs = [Observation(1e-3, s, objective + o) for s, o in zip(seeds, offsets)]
            out.append(
                ScalingInput(
                    f"{family},n={n:g}",
                    family,
                    "llama" if family == "cem" else None,
                    n,
                    6.0 * n * TOKENS,
                    variant_stats(obs, n_resamples=200),
                )
            )
    return out


def test_saturating_law_is_recovered_from_four_sizes():
    fit = fit_power_law(SIZES, [law(n) for n in SIZES])
    assert fit.form == SATURATING
    assert (fit.a * (fit.x0 / 1e6) ** fit.b, fit.b, fit.c) == pytest.approx((10.0, 0.3, 2.0), rel=1e-4)
    assert fit.inverse(law(5e6)) == pytest.approx(5e6, rel=1e-4)
    assert fit.inverse(1.5) is None  # below the irreducible term: never reached


def test_few_sizes_use_the_log_log_line():
    xs = [1e6, 1e7]
    ys = [5.0 * (x / 1e6) ** -0.2 for x in xs]
    fit = fit_power_law(xs, ys)
    assert fit.form == LOG_LOG and fit.c == 0.0 and "too few" in fit.why
    assert (fit.a, fit.b) == pytest.approx((5.0, 0.2), rel=1e-12)
    assert fit(3e6) == pytest.approx(5.0 * 3.0**-0.2, rel=1e-12)
    assert fit_power_law([1e6], [3.0]) is None


def test_multiplier_of_a_variant_on_the_shifted_law():
    summary = summarize_scaling(inputs())
    assert summary.laws[("llama", PARAMS)].form == SATURATING
    eqs = {(e.variant, e.axis): e for e in summary.equivalences}
    assert len(eqs) == 2 * len(SIZES)  # every cem variant, on both axes
    for n in SIZES:
        e = eqs[(f"cem,n={n:g}", PARAMS)]
        assert e.multiplier == pytest.approx(0.85, rel=1e-3)
        assert e.interval is None  # one seed: no interval
        f = eqs[(f"cem,n={n:g}", FLOPS)]  # FLOPs proportional to params here: same multiplier
        assert f.multiplier == pytest.approx(0.85, rel=1e-3)
    # the largest cem needs llama beyond the sampled sizes (16M / 0.85)
    assert summary.extrapolated(eqs[(f"cem,n={SIZES[-1]:g}", PARAMS)])
    assert not summary.extrapolated(eqs[(f"cem,n={SIZES[0]:g}", PARAMS)])


def test_intervals_with_seeds_contain_the_estimate_and_widen_with_spread():
    tight = summarize_scaling(inputs(seeds=(0, 1, 2), spread=0.01), n_resamples=300)
    loose = summarize_scaling(inputs(seeds=(0, 1, 2), spread=0.3), n_resamples=300)
    for a, b in zip(tight.equivalences, loose.equivalences):
        if a.axis != PARAMS or a.interval is None or b.interval is None:
            continue
        assert a.interval.contains(a.multiplier)
        assert a.interval.high - a.interval.low < b.interval.high - b.interval.low
    assert any(e.interval is not None for e in tight.equivalences)


def test_size_axis_detection():
    assert has_size_axis(inputs())
    assert not has_size_axis(inputs(sizes=[4e6]))
    assert math.isclose(summarize_scaling(inputs(sizes=[4e6])).equivalences[0].x, 4e6)


def test_multipliers_carry_no_interval_unless_asked():
    # Its percentile bootstrap under-covers at 3 seeds (analysis.scaling.N_RESAMPLES):
    # the report prints the multiplier alone.
    summary = summarize_scaling(inputs(seeds=(0, 1, 2), spread=0.1))
    assert summary.equivalences and all(e.interval is None for e in summary.equivalences)


def test_one_name_at_several_sizes_keeps_each_sizes_objective():
    """A study whose variants set d_model gets one `llama` baseline per width, all named
    `llama`: the law is fitted to each size's own objective, not the last one's."""
    named_alike = [
        ScalingInput("llama", i.family, i.baseline_family, i.params, i.train_flops, i.stats)
        if i.family == "llama"
        else i
        for i in inputs()
    ]
    summary = summarize_scaling(named_alike, n_resamples=0)
    law_fit = summary.laws[("llama", PARAMS)]
    assert law_fit.form == SATURATING
    assert [law_fit(n) for n in SIZES] == pytest.approx([law(n) for n in SIZES], rel=1e-4)
    by_name = summarize_scaling(inputs(), n_resamples=0)
    assert by_name.laws[("llama", PARAMS)] == law_fit
