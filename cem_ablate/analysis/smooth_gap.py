"""What running at one learning rate costs against the optimum, on a smooth curve (docs/design/parametrization.md#s12-parametrization).

A transfer check compares the perplexity at a transferred rate with the target's full-grid
optimum. Taken point against point that comparison is dominated by trial noise: on the width
study's recipe one trial's perplexity scatters around a smooth curve in log lr by more than the
seed-to-seed std at the best grid point, and the best of nine grid means is biased low (the
minimum of noisy means). Measured: a rate between two grid points came out worse than both of
its neighbours (docs/results/transfer.md: "Five proxy seeds, and the d 256 curve
between the grid's rates").

So the cost of a rate is read off a fitted curve instead: a quadratic in log2(lr) plus one
offset per seed (seeds share init and data order across rates), least squares over the rates
within `octaves` of a centre (the Akima lr*), and the gap f(lr) - min f over the fitted range,
relative to the curve's level at its minimum (seed-averaged). Its interval is a residual
bootstrap (residuals inflated by sqrt(n / (n - p)), the usual leverage correction), written
here because scipy.stats.bootstrap resamples observations, which would drop rates and seeds
from the fixed rate x seed design the fit needs. Its coverage is checked by simulation
(nominal with the inflation, short of it without; figures in
docs/lab-notes/from-code-comments.md); tests/analysis/test_smooth_gap.py repeats a smaller
version. The F test of the quadratic against a free mean per rate (lack of
fit) says whether a quadratic describes the basin at all: where it does not, the gap is not
read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

DENSE_POINTS = 801


@dataclass(frozen=True)
class SmoothGap:
    lr: float  # the rate judged
    lr_star: float  # the quadratic's minimum over the fitted range
    relative: float  # (f(lr) - f(lr*)) / f(lr*), f the seed-averaged curve
    low: float  # 95% interval of `relative` (residual bootstrap)
    high: float
    rates: tuple[float, ...]  # the distinct rates fitted
    n: int  # trials fitted
    residual_sd: float  # one trial's scatter around the fitted curve
    lack_of_fit_p: float  # F test: quadratic + seeds against a free mean per rate + seeds


def smooth_gap(
    observations: Iterable[tuple[float, int, float]],
    lr: float,
    centre: float,
    octaves: float = 1.0,
    n_boot: int = 2000,
    confidence: float = 0.95,
    rng: np.random.Generator | None = None,
) -> SmoothGap:
    """`observations`: (lr, seed, value) of finished trials. Raises ValueError when fewer than
    four rates lie within `octaves` of `centre`, or `lr` lies outside the fitted range."""
    rows = [
        (math.log2(a), s, v)
        for a, s, v in observations
        if math.isfinite(v) and abs(math.log2(a) - math.log2(centre)) <= octaves + 1e-9
    ]
    xs = np.array([r[0] for r in rows])
    rates = sorted(set(xs.tolist()))
    if len(rates) < 4:
        raise ValueError(
            f"{len(rates)} rates within {octaves} octave(s) of {centre:.3g}: a quadratic "
            "and its lack-of-fit test need at least 4"
        )
    x_lr = math.log2(lr)
    if not rates[0] - 1e-9 <= x_lr <= rates[-1] + 1e-9:
        raise ValueError(f"lr {lr:.3g} lies outside the fitted rates {2 ** rates[0]:.3g}-{2 ** rates[-1]:.3g}")
    y = np.array([r[2] for r in rows])
    seeds = sorted({r[1] for r in rows})
    shift = float(np.mean(rates))
    x = xs - shift
    # effects coding: the intercept is the seed-averaged level
    seed_cols = [np.array([(r[1] == s) - (r[1] == seeds[-1]) for r in rows], float) for s in seeds[:-1]]
    design = np.column_stack([np.ones_like(x), x, x**2, *seed_cols])
    grid = np.linspace(rates[0], rates[-1], DENSE_POINTS) - shift

    def gap_of(beta: np.ndarray) -> tuple[float, float]:
        curve = beta[0] + beta[1] * grid + beta[2] * grid**2
        i = int(np.argmin(curve))
        at = beta[0] + beta[1] * (x_lr - shift) + beta[2] * (x_lr - shift) ** 2
        return (at - curve[i]) / curve[i], grid[i] + shift

    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    fitted = design @ beta
    residuals = y - fitted
    n, p = design.shape[0], np.linalg.matrix_rank(design)
    relative, x_star = gap_of(beta)
    rng = rng if rng is not None else np.random.default_rng(0)
    inflated = residuals * math.sqrt(n / max(n - p, 1))
    boot = np.array(
        [gap_of(np.linalg.lstsq(design, fitted + rng.choice(inflated, n), rcond=None)[0])[0] for _ in range(n_boot)]
    )
    low, high = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])

    # lack of fit: a free mean per rate (plus the same seed offsets) against the quadratic
    rate_cols = [(xs == r).astype(float) for r in rates[1:]]
    free = np.column_stack([np.ones_like(x), *rate_cols, *seed_cols])
    rss_free = float(np.sum((y - free @ np.linalg.lstsq(free, y, rcond=None)[0]) ** 2))
    rss_quad = float(np.sum(residuals**2))
    p_free = np.linalg.matrix_rank(free)
    df1, df2 = p_free - p, n - p_free
    if df1 > 0 and df2 > 0 and rss_free > 0:
        f_stat = ((rss_quad - rss_free) / df1) / (rss_free / df2)
        lack_p = float(stats.f.sf(f_stat, df1, df2))
    else:
        lack_p = float("nan")
    return SmoothGap(
        lr=lr,
        lr_star=2.0 ** float(x_star),
        relative=float(relative),
        low=float(low),
        high=float(high),
        rates=tuple(2.0**r for r in rates),
        n=n,
        residual_sd=math.sqrt(rss_quad / max(n - p, 1)),
        lack_of_fit_p=lack_p,
    )
