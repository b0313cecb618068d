"""Intervals of lr* and objective* that cover: their coverage is checked by simulation.

The estimate is the minimum of the Akima curve through the seed means (docs/design/experiments.md#s8-learning-rate-search,
`analysis.akima`). Its 95% interval, on log2(lr) for lr* (the axis of the fit):

    estimate ± ( t_{0.975, n−1} · sd(per-seed optima) / √n  +  Σ |estimate − other| )

- the first term is a t-interval over the seeds: each seed's own Akima curve has an
  optimum, and their spread over seeds (sd, ddof=1) measures how much the optimum of
  an n-seed mean curve moves from study to study;
- the second is the interpolation's own uncertainty: a five-point grid says little
  about the curve between its points, and the shape there is a modelling choice. The
  optimum of the mean curve is also located with the two other standard interpolants
  (of Akima, modified Akima "makima" and a not-a-knot cubic spline, the two the fit
  did not use), and their distances to the estimate are added. Where the truth is
  skewed (perplexity rises faster towards divergence), either term alone under-covered
  in simulation; the two together reach the bar below throughout (measured: see
  docs/lab-notes/from-code-comments.md).
The lr* interval is clipped to the sampled range (the estimate is the minimum over
that range; beyond it the grid says nothing); where lr* sits on the grid's edge the
true optimum may lie beyond it, and no lr* interval is given.

Replaces the percentile bootstrap over seeds, which covered the true optimum in far
fewer simulated studies than the 95% it printed (figures in the lab notes). This
interval's coverage is checked by simulation in tests/analysis/test_optimum_coverage.py
(curves quadratic-ish in log2 lr, optimum at several positions, per-seed level shifts,
tilts and per-trial noise): >= 0.90 at nominal 0.95 for n >= 3. With fewer seeds no
interval is printed ("n too small"): a t quantile with one degree of freedom is 12.7,
and a two-seed spread says next to nothing about the next seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from cem_ablate.analysis.akima import curve_minima

LEVEL = 0.95
MIN_SEEDS = 3  # intervals from 3 seeds: the n at which coverage was checked
MIN_LRS_FOR_LR_STAR = 3  # an lr* is estimated from a minimum with a learning rate on each side
METHOD = "t over per-seed optima + interpolants' spread"


@dataclass(frozen=True)
class OptimumBounds:
    """95% intervals of lr* (in lr) and objective*, or why there are none."""

    lr: tuple[float, float] | None  # None also when lr* sits on the grid's edge
    objective: tuple[float, float] | None
    reason: str | None = None  # why an interval is missing: "n too small (2 seeds; intervals from 3)", edge
    n: int = 0  # seeds with an optimum of their own
    level: float = LEVEL
    method: str = METHOD


INTERPOLANTS = ("akima", "makima", "spline")


def other_optima(lrs, values, method: str = "akima") -> list[tuple[np.ndarray, np.ndarray]]:
    """The mean curve's minimum by the interpolants other than `method`, vectorized."""
    return [
        curve_minima(lrs, values, "akima", kind="spline") if other == "spline" else curve_minima(lrs, values, other)
        for other in INTERPOLANTS
        if other != method
    ]


def half_widths(per_seed_x, per_seed_y, estimate_x, estimate_y, others, level: float = LEVEL):
    """The two half-widths (log2 lr*, objective*), vectorized over leading axes; the
    seeds are the last axis of `per_seed_*`; `others` are `other_optima`."""
    px, py = np.asarray(per_seed_x, dtype=np.float64), np.asarray(per_seed_y, dtype=np.float64)
    n = px.shape[-1]
    q = stats.t.ppf(0.5 + level / 2.0, n - 1)
    hx = q * px.std(axis=-1, ddof=1) / math.sqrt(n)
    hy = q * py.std(axis=-1, ddof=1) / math.sqrt(n)
    for ox, oy in others:
        hx = hx + np.abs(np.asarray(estimate_x) - ox)
        hy = hy + np.abs(np.asarray(estimate_y) - oy)
    return hx, hy


def interval_arrays(lrs, values, method: str = "akima", level: float = LEVEL):
    """Vectorized intervals for complete data: `values[..., seed, lr]` at the sorted
    grid `lrs`. Returns (x*, x_low, x_high, y*, y_low, y_high), x on log2(lr), each of
    the leading shape: the estimate (Akima minimum of the seed-mean curve) and its
    interval. Same rule as `optimum_bounds`, for simulating many studies at once."""
    y = np.asarray(values, dtype=np.float64)
    mean = y.mean(axis=-2)
    ex, ey = curve_minima(lrs, mean, method)
    px, py = curve_minima(lrs, y, method)
    hx, hy = half_widths(px, py, ex, ey, other_optima(lrs, mean, method), level)
    x_lo, x_hi = math.log2(min(lrs)), math.log2(max(lrs))
    return ex, np.maximum(ex - hx, x_lo), np.minimum(ex + hx, x_hi), ey, ey - hy, ey + hy


def optimum_bounds(
    per_seed: Mapping[int, Mapping[float, float]],
    lrs,
    ppls,
    lr_star: float,
    objective_star: float,
    method: str = "akima",
    level: float = LEVEL,
) -> OptimumBounds:
    """Intervals of one variant's lr* and objective*.

    per_seed: seed -> {lr: finite value}; `lrs`/`ppls`: the seed-mean points the
    estimate (`lr_star`, `objective_star`, an `AkimaFit`) went through. A seed with
    fewer than 2 finite learning rates has no optimum of its own and is left out.
    """
    if len(lrs) < 2:  # objective* is that learning rate's seed mean: a t-interval over the seeds
        ys = [float(v) for values in per_seed.values() for v in values.values() if math.isfinite(v)]
        if len(ys) < MIN_SEEDS:
            return OptimumBounds(
                None,
                None,
                f"n too small ({len(ys)} seed{'s' * (len(ys) != 1)}; intervals from {MIN_SEEDS})",
                len(ys),
                level,
            )
        q = stats.t.ppf(0.5 + level / 2.0, len(ys) - 1)
        h = float(q * np.std(ys, ddof=1) / math.sqrt(len(ys)))
        return OptimumBounds(
            None, (objective_star - h, objective_star + h), "one learning rate: lr* is not estimated", len(ys), level
        )
    px, py = [], []
    for values in per_seed.values():
        points = sorted((float(lr), float(v)) for lr, v in values.items() if math.isfinite(v))
        if len(points) >= 2:
            x, y = curve_minima([p[0] for p in points], [p[1] for p in points], method)
            px.append(float(x))
            py.append(float(y))
    n = len(px)
    if n < MIN_SEEDS:
        return OptimumBounds(
            None, None, f"n too small ({n} seed{'s' * (n != 1)}; intervals from {MIN_SEEDS})", n, level
        )
    ex, ey = math.log2(lr_star), float(objective_star)
    hx, hy = (float(h) for h in half_widths(px, py, ex, ey, other_optima(lrs, ppls, method), level))
    objective = (ey - hy, ey + hy)
    if not min(lrs) < lr_star < max(lrs):  # the true optimum may lie beyond the grid: no interval
        return OptimumBounds(None, objective, "lr* at the grid's edge: a bound, no interval", n, level)
    lr = (max(2.0 ** (ex - hx), min(lrs)), min(2.0 ** (ex + hx), max(lrs)))
    return OptimumBounds(lr, objective, None, n, level)
