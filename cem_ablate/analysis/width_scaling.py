"""Does a penalty shrink with width? The width study's analysis, pure.

Per width d and seed s, the log-ratio y = ln(objective_variant / objective_baseline)
(T = 2 vs T = 1 of CEM attention: paired by seed, same learning rate; CEM attention
T = 1 vs Llama: not paired -- different architectures share no initialization -- so
the per-width Δ is mean ln(variant) − mean ln(baseline), Welch). Then across widths

    Δ(d) = a + b · log2(d / 64)

fitted by ordinary least squares on the per-width Δ (one point per width), with the t
interval for b on k − 2 degrees of freedom (k widths). Why per-width points and not
the seed-level ones: seeds of one width share that width's learning rate and its
departure from the line (a width-level random effect); seed-level OLS would count
them as independent and under-cover whenever the line does not fit exactly. With
equal seeds per width both give the same b (the acceptance recomputation:
`scipy.stats.linregress` on the per-width means); only the interval differs.

- "the penalty shrinks with width" iff b's (1 − α) interval lies below 0;
- the zero crossing d0 = 64 · 2^(−a/b), an extrapolation, with Fieller's interval for
  −a/b: the x where the fitted line's (1 − α) band contains 0. It is bounded exactly
  when b's interval excludes 0; otherwise "none" (no crossing the data can place);
- the slope's p is a two-sided t-test of b = 0; the report Holm-adjusts the study's
  slope tests together (`decision.holm`) at the study's α.

The per-width Δ and its interval come from `analysis.decision.decide` on the logs
(the platform's one rule: paired t or Welch, at the design's level).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from cem_ablate.analysis.decision import ALPHA, Decision, Design, decide

REFERENCE_WIDTH = 64  # x = log2(d / 64): a is the Δ at the readings study's width


@dataclass(frozen=True)
class WidthInput:
    """One width's per-seed objectives (seed -> value, e.g. test perplexity) of the two
    sides at the learning rate the comparison uses."""

    width: int
    variant: Mapping[int, float]
    baseline: Mapping[int, float]
    paired: bool


@dataclass(frozen=True)
class WidthDelta:
    width: int
    decision: Decision  # on log values: Δ = mean log-ratio, its interval, p, n

    @property
    def x(self) -> float:
        return math.log2(self.width / REFERENCE_WIDTH)


@dataclass(frozen=True)
class Crossing:
    width: float | None  # d0 = 64 · 2^(−a/b); None: b is 0
    low: float | None  # Fieller interval in widths; None with `why`
    high: float | None
    why: str = ""  # "" when bounded, else why there is no interval


@dataclass(frozen=True)
class WidthTrend:
    a: float  # Δ at d = 64 (log-ratio)
    b: float  # change of Δ per doubling of width
    b_low: float
    b_high: float
    se_a: float
    se_b: float
    cov_ab: float
    df: int
    p: float  # two-sided, b = 0
    level: float
    crossing: Crossing
    widths: tuple[int, ...]

    @property
    def shrinks(self) -> bool:
        return self.b_high < 0

    @property
    def grows(self) -> bool:
        return self.b_low > 0

    def reading(self) -> str:
        if self.shrinks:
            return "the penalty shrinks with width"
        if self.grows:
            return "the penalty grows with width"
        return "no trend resolved (b's interval contains 0)"


def _logs(values: Mapping[int, float]) -> dict[int, float]:
    return {int(s): math.log(v) for s, v in values.items() if v is not None and math.isfinite(v) and v > 0}


def width_delta(item: WidthInput, alpha: float = ALPHA) -> WidthDelta:
    """Δ = mean ln(variant/baseline) at one width, by the platform's rule (one look)."""
    v, b = _logs(item.variant), _logs(item.baseline)
    n = len(set(v) & set(b)) if item.paired else min(len(v), len(b))
    return WidthDelta(item.width, decide(v, b, paired=item.paired, design=Design.fixed(max(n, 1), alpha)))


def per_seed_log_ratios(item: WidthInput) -> dict[int, float]:
    """ln(variant_s / baseline_s) per shared seed (meaningful for paired widths)."""
    v, b = _logs(item.variant), _logs(item.baseline)
    return {s: v[s] - b[s] for s in sorted(set(v) & set(b))}


def fieller(a: float, b: float, var_a: float, var_b: float, cov_ab: float, t: float) -> tuple[float, float] | None:
    """Fieller's interval for x0 = −a/b: {x : (a + b x)² <= t² Var(a + b x)}; None when
    it is not a bounded interval (b² <= t² Var(b): b's interval contains 0)."""
    qa = b * b - t * t * var_b
    if qa <= 0:
        return None
    qb = 2.0 * (a * b - t * t * cov_ab)
    qc = a * a - t * t * var_a
    disc = qb * qb - 4.0 * qa * qc
    if disc < 0:  # cannot happen for a valid covariance; kept for rounding
        return None
    root = math.sqrt(disc)
    return ((-qb - root) / (2.0 * qa), (-qb + root) / (2.0 * qa))


def fit_trend(deltas: Sequence[WidthDelta], alpha: float = ALPHA) -> WidthTrend | None:
    """OLS of the per-width Δ on log2(d/64); None with fewer than 3 widths (no df)."""
    points = [(d.x, d.decision.delta) for d in deltas if d.decision.delta is not None]
    if len(points) < 3:
        return None
    x = np.asarray([p[0] for p in points], dtype=np.float64)
    y = np.asarray([p[1] for p in points], dtype=np.float64)
    fit = stats.linregress(x, y)
    k = len(x)
    df = k - 2
    sxx = float(np.sum((x - x.mean()) ** 2))
    resid = y - (fit.intercept + fit.slope * x)
    s2 = float(np.sum(resid**2)) / df
    var_b = s2 / sxx
    var_a = s2 * (1.0 / k + x.mean() ** 2 / sxx)
    cov_ab = -x.mean() * s2 / sxx
    level = 1.0 - alpha
    t = float(stats.t.ppf(1.0 - alpha / 2.0, df))
    a, b = float(fit.intercept), float(fit.slope)
    se_b = math.sqrt(var_b)
    p = float(fit.pvalue) if se_b > 0 else (0.0 if b != 0 else 1.0)
    bounds = fieller(a, b, var_a, var_b, cov_ab, t)
    d0 = REFERENCE_WIDTH * 2.0 ** (-a / b) if b != 0 and abs(a / b) < 1000 else None
    if bounds is None:
        crossing = Crossing(d0, None, None, "none: b's interval contains 0")
    else:
        lo, hi = bounds
        crossing = Crossing(
            d0,
            REFERENCE_WIDTH * 2.0**lo if lo < 1000 else math.inf,
            REFERENCE_WIDTH * 2.0**hi if hi < 1000 else math.inf,
        )
    return WidthTrend(
        a,
        b,
        b - t * se_b,
        b + t * se_b,
        math.sqrt(var_a),
        se_b,
        cov_ab,
        df,
        p,
        level,
        crossing,
        tuple(sorted(d.width for d in deltas if d.decision.delta is not None)),
    )


def energy_descent(traces: Sequence[Mapping[str, float]], step: int = 2) -> tuple[int, int]:
    """(lowered, total): of every CEM sublayer in every trace ({"energy/<sublayer>/step<t>":
    E}, the energy before step t; step T: after the last), how many had E(step) <
    E(step − 1), i.e. recursion step `step` (the second, by default) lowered the energy."""
    lowered = total = 0
    for trace in traces:
        for key, after in trace.items():
            head, _, tail = key.rpartition("/step")
            if not tail.isdigit() or int(tail) != step:
                continue
            before = trace.get(f"{head}/step{step - 1}")
            if before is None or not (math.isfinite(before) and math.isfinite(after)):
                continue
            total += 1
            lowered += after < before
    return lowered, total
