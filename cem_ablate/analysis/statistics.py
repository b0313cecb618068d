"""One variant's seeds: per-lr statistics, lr* and objective* with their intervals.

Every objective of the platform is minimized (text: test perplexity, GP: test RMSE,
MQAR: recall error = 1 - recall accuracy; `TrainResult.objective`), so "better" always
means a lower value. All arithmetic is float64; distributions come from scipy.stats.

Per variant (`variant_stats`):
- per learning rate: mean, sample std (ddof=1; None for one seed) and n over seeds;
- lr* and objective*: minimum of the Akima curve through the seed means (docs/design/experiments.md#s8-learning-rate-search,
  `analysis.akima`), with 95% intervals from 3 seeds on (`analysis.optimum`: a
  t-interval over the seeds' own optima plus the interpolation's uncertainty, its
  coverage checked by simulation); with fewer seeds "n too small" instead.

Verdicts (Δ of a variant against its baseline, its test, p and Holm p) are not
here: `analysis.decision` is the one rule, `study.verdicts` picks the comparisons.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from cem_ablate.analysis.akima import AkimaFit, fit_akima
from cem_ablate.analysis.optimum import optimum_bounds

LEVEL = 0.95

# The objective of each task (TrainResult.objective), all minimized.
OBJECTIVE_NAMES = {"text": "test perplexity", "gp": "test RMSE", "mqar": "recall error"}
OBJECTIVE_SHORT = {"text": "ppl", "gp": "RMSE", "mqar": "recall err"}


@dataclass(frozen=True)
class Observation:
    """One finished trial: its learning rate, seed and final objective."""

    lr: float
    seed: int
    value: float


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    level: float = LEVEL
    method: str = ""  # "t", "welch", `analysis.optimum.METHOD`
    widened: bool = False  # read back from stats.json written by the former percentile bootstrap

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class LrStats:
    lr: float
    seeds: tuple[int, ...]
    values: tuple[float, ...]  # in the order of `seeds`

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(np.asarray(self.values, dtype=np.float64)))

    @property
    def std(self) -> float | None:
        """Sample standard deviation (ddof=1); None for a single seed."""
        return float(np.std(np.asarray(self.values, dtype=np.float64), ddof=1)) if self.n > 1 else None

    def by_seed(self) -> dict[int, float]:
        return dict(zip(self.seeds, self.values))


@dataclass(frozen=True)
class Optimum:
    fit: AkimaFit  # through the seed means
    n_seeds: int
    lr_interval: Interval | None  # None below `analysis.optimum.MIN_SEEDS` seeds (see interval_note)
    objective_interval: Interval | None
    interval_note: str | None = None  # why there is no interval, e.g. "n too small (2 seeds; intervals from 3)"

    @property
    def lr_star(self) -> float:
        return self.fit.lr_star

    @property
    def objective_star(self) -> float:
        return self.fit.ppl_star

    @property
    def edge(self) -> str | None:
        """ "low"/"high" when the minimum is an end of a grid of >= 2 points (lr* is then
        only a bound); a one-point grid has no edge to speak of."""
        return self.fit.edge if self.fit.n_points > 1 else None


@dataclass(frozen=True)
class VariantStats:
    by_lr: tuple[LrStats, ...]  # sorted by lr
    optimum: Optimum | None  # None when no trial finished

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(sorted({s for row in self.by_lr for s in row.seeds}))

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    def at(self, lr: float) -> LrStats | None:
        return next((row for row in self.by_lr if row.lr == lr), None)

    @property
    def best_grid_lr(self) -> float | None:
        """The grid learning rate nearest lr* (in log2 lr); None without an optimum."""
        return nearest_lr([r.lr for r in self.by_lr], self.optimum.lr_star) if self.optimum else None


# -- per variant -------------------------------------------------------------------------


def observations(trials: Iterable) -> list[Observation]:
    """Finished trials (objects with lr, seed, status, value: `config.trial_record.TrialRecord`)
    -> observations; diverged, failed, pruned and running trials carry no value. The
    status is compared as its stored string: analysis imports nothing of the core."""
    out = []
    for t in trials:
        if getattr(t, "status", "finished") != "finished":
            continue
        lr, seed, value = t.lr, t.seed, t.value
        if lr is None or seed is None or value is None or not (math.isfinite(lr) and lr > 0 and math.isfinite(value)):
            continue
        out.append(Observation(float(lr), int(seed), float(value)))
    return out


def by_lr(obs: Iterable[Observation]) -> tuple[LrStats, ...]:
    grouped: dict[float, dict[int, float]] = defaultdict(dict)
    for o in obs:
        grouped[o.lr][o.seed] = o.value  # one trial per (lr, seed): a slot finishes once
    return tuple(
        LrStats(lr, tuple(sorted(grouped[lr])), tuple(grouped[lr][s] for s in sorted(grouped[lr])))
        for lr in sorted(grouped)
    )


def fit_for_seeds(rows: tuple[LrStats, ...], seeds: Iterable[int], method: str) -> AkimaFit | None:
    """Akima fit of the mean curve over `seeds` (a multiset: a seed drawn twice counts twice)."""
    seeds = list(seeds)
    points = []
    for row in rows:
        values = row.by_seed()
        drawn = [values[s] for s in seeds if s in values]
        if drawn:
            points.append((row.lr, float(np.mean(np.asarray(drawn, dtype=np.float64)))))
    return fit_akima(points, method=method)


def variant_stats(
    obs: Iterable[Observation],
    method: str = "akima",
    n_resamples: int | None = None,
    rng_seed: int | None = None,
    *,
    intervals: bool = True,
) -> VariantStats:
    """Per-lr statistics and the optimum, with its intervals (`analysis.optimum`) unless
    `intervals=False` (the sequential seeds' check needs only the fit). `n_resamples`
    and `rng_seed` are what the former bootstrap took: `n_resamples=0` still means no
    intervals; otherwise they are ignored (the interval is deterministic)."""
    rows = by_lr(obs)
    seeds = tuple(sorted({s for row in rows for s in row.seeds}))
    fit = fit_for_seeds(rows, seeds, method)
    if fit is None:
        return VariantStats(rows, None)
    if not intervals or n_resamples == 0:
        return VariantStats(rows, Optimum(fit, len(seeds), None, None))
    per_seed: dict[int, dict[float, float]] = defaultdict(dict)
    for row in rows:
        for s, v in row.by_seed().items():
            per_seed[s][row.lr] = v
    bounds = optimum_bounds(per_seed, fit.lrs, fit.ppls, fit.lr_star, fit.ppl_star, method, LEVEL)

    def interval(ends: tuple[float, float] | None) -> Interval | None:
        return Interval(*ends, LEVEL, bounds.method) if ends is not None else None

    return VariantStats(rows, Optimum(fit, len(seeds), interval(bounds.lr), interval(bounds.objective), bounds.reason))


# -- the grid point of an optimum ----------------------------------------------------------


def nearest_lr(lrs: Iterable[float], target: float) -> float | None:
    """The grid learning rate nearest `target` in log2(lr) (the fit's axis); ties: the lower."""
    lrs = sorted(lrs)
    return min(lrs, key=lambda lr: abs(math.log2(lr) - math.log2(target))) if lrs else None


# -- one variant's statistics, as logged on its parent run and read back by the report -----


@dataclass(frozen=True)
class VariantStatistics:
    """Everything the report says about a variant's seeds: computed once, by the study
    (`study.summary`), logged on the parent run as `stats.json` and read back."""

    objective: str  # the task's metric: "test perplexity", "test RMSE", "recall error"
    stats: VariantStats
    # Left empty: verdicts are `study.verdicts`'. stats.json written before verdicts moved
    # there carries the old paired Δs here; they are read back as plain dicts and shown nowhere.
    comparisons: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> VariantStatistics:
        def interval(d):
            return Interval(**d) if d else None

        stats = data["stats"]
        rows = tuple(LrStats(r["lr"], tuple(r["seeds"]), tuple(r["values"])) for r in stats["by_lr"])
        opt = stats["optimum"]
        optimum = (
            None
            if opt is None
            else Optimum(
                AkimaFit.from_dict(opt["fit"]),
                opt["n_seeds"],
                interval(opt["lr_interval"]),
                interval(opt["objective_interval"]),
                opt.get("interval_note"),
            )
        )
        return cls(data["objective"], VariantStats(rows, optimum), dict(data.get("comparisons") or {}))
