"""Learning-rate optimum by Akima interpolation over log2(lr) (docs/design/experiments.md#s8-learning-rate-search, paper Fig. 3a).

The paper trains five learning rates and interpolates final test perplexity with
Akima's method; the minimum of the curve on a dense grid over the sampled range is
the estimated optimal learning rate `lr*` and perplexity `ppl*`. `derivative().roots()`
is useless here (empty for monotone data, NaN on flat parts), so the curve is
evaluated densely, endpoints included, and a minimum at an endpoint is flagged: the
grid then holds no interior optimum and lr* is only a bound.

Diverged or failed trials (non-finite perplexity) are excluded from the fit; the
caller reports them. Several seeds at one learning rate are averaged first.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DENSE_POINTS = 2001


@dataclass(frozen=True)
class AkimaFit:
    lr_star: float
    ppl_star: float
    edge: str | None  # "low" / "high" when the minimum sits on the grid's edge, else None
    lrs: tuple[float, ...]  # the distinct finite points the fit went through (sorted)
    ppls: tuple[float, ...]  # mean perplexity per learning rate
    curve_lrs: tuple[float, ...] = field(repr=False, default=())
    curve_ppls: tuple[float, ...] = field(repr=False, default=())
    method: str = "akima"

    @property
    def at_edge(self) -> bool:
        return self.edge is not None

    @property
    def n_points(self) -> int:
        return len(self.lrs)

    def to_dict(self) -> dict:
        """JSON form, part of the variant's statistics (`stats.json` on its parent run),
        read back by the report: the fit is computed once, by the study (study.summary)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> AkimaFit:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**fields)


def mean_by_lr(points: Iterable[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Finite (lr, ppl) pairs -> sorted distinct lrs and the mean ppl at each."""
    by_lr: dict[float, list[float]] = defaultdict(list)
    for lr, ppl in points:
        if lr is not None and ppl is not None and math.isfinite(lr) and lr > 0 and math.isfinite(ppl):
            by_lr[float(lr)].append(float(ppl))
    lrs = sorted(by_lr)
    return lrs, [float(np.mean(by_lr[lr])) for lr in lrs]


def fit_akima(
    points: Iterable[tuple[float, float]], method: str = "akima", dense: int = DENSE_POINTS
) -> AkimaFit | None:
    """Fit ppl(log2 lr) through the finite points; None when there are none.

    With a single finite point there is nothing to interpolate: that point is the
    estimate, flagged as an edge (it is the edge of a one-point grid).
    """
    lrs, ppls = mean_by_lr(points)
    if not lrs:
        return None
    if len(lrs) == 1:
        return AkimaFit(lrs[0], ppls[0], "low", tuple(lrs), tuple(ppls), tuple(lrs), tuple(ppls), method)
    from scipy.interpolate import Akima1DInterpolator

    x = np.log2(np.asarray(lrs))
    y = np.asarray(ppls)
    curve = Akima1DInterpolator(x, y, method=method)
    xs = np.linspace(x[0], x[-1], dense)  # linspace includes both endpoints
    ys = curve(xs)
    i = int(np.nanargmin(ys))
    edge = "low" if i == 0 else "high" if i == dense - 1 else None
    return AkimaFit(
        lr_star=float(2.0 ** xs[i]),
        ppl_star=float(ys[i]),
        edge=edge,
        lrs=tuple(lrs),
        ppls=tuple(ppls),
        curve_lrs=tuple(float(v) for v in 2.0**xs),
        curve_ppls=tuple(float(v) for v in ys),
        method=method,
    )


def curve_minima(
    lrs, values, method: str = "akima", dense: int = DENSE_POINTS, kind: str = "akima"
) -> tuple[np.ndarray, np.ndarray]:
    """Minimum of each curve through `values[..., i]` at `lrs[i]` (>= 2 sorted distinct
    learning rates, finite values), on the same dense log2(lr) grid as `fit_akima`.

    Vectorized over the leading axes of `values` (many seeds or simulated studies at
    once). Returns (log2 lr*, objective*) arrays of the leading shape. `kind="spline"`
    uses a not-a-knot cubic spline instead of Akima's interpolant: where the
    interpolants disagree, the interpolation itself is uncertain (`analysis.optimum`).
    """
    from scipy.interpolate import Akima1DInterpolator, CubicSpline

    x = np.log2(np.asarray(lrs, dtype=np.float64))
    y = np.asarray(values, dtype=np.float64)
    lead = y.shape[:-1]
    flat = y.reshape(-1, y.shape[-1]).T  # (n_lrs, curves)
    xs = np.linspace(x[0], x[-1], dense)
    if kind == "spline":
        ys = CubicSpline(x, flat, axis=0)(xs)
    else:
        ys = Akima1DInterpolator(x, flat, axis=0, method=method)(xs)
    i = np.nanargmin(ys, axis=0)
    return xs[i].reshape(lead), ys[i, np.arange(ys.shape[1])].reshape(lead)
