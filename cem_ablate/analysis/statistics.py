"""Seeds, intervals and verdicts: how sure a study is that a variant beats its baseline.

Every objective of the platform is minimized (text: test perplexity, GP: test RMSE,
MQAR: recall error = 1 - recall accuracy; `TrainResult.objective`), so "better" always
means a lower value. All arithmetic is float64; distributions come from scipy.stats.

Per variant (`variant_stats`):
- per learning rate: mean, sample std (ddof=1; None for one seed) and n over seeds;
- lr* and objective*: minimum of the Akima curve through the seed means (SPEC §8,
  `analysis.akima`), with 95% intervals from 3 seeds on (`analysis.optimum`: a
  t-interval over the seeds' own optima plus the interpolation's uncertainty, its
  coverage checked by simulation); with fewer seeds "n too small" instead.

Per variant and baseline (`compare`): the paired difference Δ = variant - baseline,
pairing trials of the same learning rate and seed (same init and data order, so the
seed-to-seed noise largely cancels), at two grid points:
- "baseline lr*": the grid learning rate nearest (in log2 lr, the axis of the fit) to
  the baseline's Akima lr*: "does the variant beat the tuned baseline as a drop-in?";
- "own lr*": the grid learning rate nearest to the variant's own Akima lr*, against
  the baseline at that same learning rate.
Each gets a 95% t-interval (`scipy.stats.ttest_rel(...).confidence_interval`), a
verdict (`better` when the interval lies below 0, `worse` above, else `unresolved`)
and the number of seeds needed (`seeds_needed`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from cem_ablate.analysis.akima import AkimaFit, fit_akima
from cem_ablate.analysis.optimum import optimum_bounds

LEVEL = 0.95
MAX_SEEDS_NEEDED = 100_000  # beyond this, "needs more seeds than anyone will train": None

BETTER, WORSE, UNRESOLVED = "better", "worse", "unresolved"
AT_BASELINE_OPTIMUM, AT_OWN_OPTIMUM = "baseline lr*", "own lr*"

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
        """"low"/"high" when the minimum is an end of a grid of >= 2 points (lr* is then
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


@dataclass(frozen=True)
class PairedDelta:
    at: str  # AT_BASELINE_OPTIMUM or AT_OWN_OPTIMUM
    lr: float  # the grid learning rate both are compared at
    seeds: tuple[int, ...]  # the seeds finished by both at `lr`
    delta: float | None  # mean of (variant - baseline) over those seeds
    std: float | None  # std of the differences (ddof=1)
    interval: Interval | None  # 95% t-interval of the mean difference (n >= 2)
    p_value: float | None
    verdict: str
    seeds_needed: int | None  # see `seeds_needed`

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def resolved(self) -> bool:
        return self.verdict != UNRESOLVED


@dataclass(frozen=True)
class Comparison:
    at_baseline_optimum: PairedDelta | None
    at_own_optimum: PairedDelta | None

    @property
    def verdict(self) -> str:
        """The headline verdict: at the baseline's lr* (the tuned baseline)."""
        return self.at_baseline_optimum.verdict if self.at_baseline_optimum else UNRESOLVED


# -- per variant -------------------------------------------------------------------------


def observations(trials: Iterable) -> list[Observation]:
    """Finished trials (objects with lr, seed, status, ppl: `TrialPoint`, `TrialRecord`)
    -> observations; diverged, failed, pruned and running trials carry no value."""
    out = []
    for t in trials:
        if getattr(t, "status", "finished") != "finished":
            continue
        lr, seed, value = t.lr, t.seed, t.ppl
        if lr is None or seed is None or value is None or not (math.isfinite(lr) and lr > 0 and math.isfinite(value)):
            continue
        out.append(Observation(float(lr), int(seed), float(value)))
    return out


def by_lr(obs: Iterable[Observation]) -> tuple[LrStats, ...]:
    grouped: dict[float, dict[int, float]] = defaultdict(dict)
    for o in obs:
        grouped[o.lr][o.seed] = o.value  # one trial per (lr, seed): a slot finishes once
    return tuple(LrStats(lr, tuple(sorted(grouped[lr])), tuple(grouped[lr][s] for s in sorted(grouped[lr])))
                 for lr in sorted(grouped))


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


def variant_stats(obs: Iterable[Observation], method: str = "akima", n_resamples: int | None = None,
                  rng_seed: int | None = None, *, intervals: bool = True) -> VariantStats:
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

    return VariantStats(rows, Optimum(fit, len(seeds), interval(bounds.lr), interval(bounds.objective),
                                      bounds.reason))


# -- variant vs baseline -------------------------------------------------------------------


def nearest_lr(lrs: Iterable[float], target: float) -> float | None:
    """The grid learning rate nearest `target` in log2(lr) (the fit's axis); ties: the lower."""
    lrs = sorted(lrs)
    return min(lrs, key=lambda lr: abs(math.log2(lr) - math.log2(target))) if lrs else None


def seeds_needed(delta: float, std: float, level: float = LEVEL, cap: int = MAX_SEEDS_NEEDED) -> int | None:
    """Seeds a paired t-test needs to resolve `delta` at spread `std` of the differences.

    Definition: the smallest n >= 2 whose two-sided t-interval half-width,
    t_{(1+level)/2, n-1} * std / sqrt(n), is below |delta| -- i.e. if the next seeds
    showed the same mean difference and spread, the interval would exclude 0. (A
    precision criterion, not 80%-power: with the true Δ equal to the observed one, such
    an n resolves it about half the time.) None when delta is 0 or beyond `cap`.
    """
    from scipy.stats import t

    if not math.isfinite(delta) or delta == 0.0 or not math.isfinite(std):
        return None
    if std == 0.0:
        return 2
    n = np.arange(2, cap + 1, dtype=np.float64)
    half_width = t.ppf(0.5 + level / 2.0, n - 1.0) * std / np.sqrt(n)
    below = np.flatnonzero(half_width < abs(delta))
    return int(n[below[0]]) if below.size else None


def verdict_of(interval: Interval | None) -> str:
    """Minimized objective: an interval of Δ = variant - baseline below 0 is better."""
    if interval is None:
        return UNRESOLVED
    if interval.high < 0.0:
        return BETTER
    if interval.low > 0.0:
        return WORSE
    return UNRESOLVED


def paired_delta(variant: LrStats | None, baseline: LrStats | None, at: str, lr: float,
                 level: float = LEVEL) -> PairedDelta:
    """Δ = variant - baseline over the seeds both finished at `lr`, with a t-interval."""
    from scipy.stats import ttest_rel

    v = variant.by_seed() if variant is not None else {}
    b = baseline.by_seed() if baseline is not None else {}
    seeds = tuple(sorted(set(v) & set(b)))
    if not seeds:
        return PairedDelta(at, lr, seeds, None, None, None, None, UNRESOLVED, None)
    xv = np.asarray([v[s] for s in seeds], dtype=np.float64)
    xb = np.asarray([b[s] for s in seeds], dtype=np.float64)
    diffs = xv - xb
    delta = float(np.mean(diffs))
    if len(seeds) == 1:  # no spread to judge by
        return PairedDelta(at, lr, seeds, delta, None, None, None, UNRESOLVED, None)
    std = float(np.std(diffs, ddof=1))
    if std == 0.0:  # identical differences: t is undefined (scipy gives NaN); the interval is the point
        interval = Interval(delta, delta, level, "t")
        p_value = 0.0 if delta != 0.0 else 1.0
    else:
        result = ttest_rel(xv, xb)
        ci = result.confidence_interval(level)
        interval = Interval(float(ci.low), float(ci.high), level, "t")
        p_value = float(result.pvalue)
    return PairedDelta(at, lr, seeds, delta, std, interval, p_value, verdict_of(interval),
                       seeds_needed(delta, std, level))


def compare(variant: VariantStats, baseline: VariantStats) -> Comparison:
    """Paired Δ at the baseline's lr* grid point and at the variant's own lr* grid point."""

    def at(lr: float | None, label: str) -> PairedDelta | None:
        return None if lr is None else paired_delta(variant.at(lr), baseline.at(lr), label, lr)

    return Comparison(at(baseline.best_grid_lr, AT_BASELINE_OPTIMUM), at(variant.best_grid_lr, AT_OWN_OPTIMUM))


@dataclass(frozen=True)
class OptimaDelta:
    """Δ between two variants each at its own best grid point: different learning rates,
    so the seeds are not paired; Welch's t-interval (unequal variances)."""

    variant_lr: float
    baseline_lr: float
    n_variant: int
    n_baseline: int
    delta: float  # mean(variant at its lr) - mean(baseline at its lr)
    interval: Interval | None  # 95% Welch interval (>= 2 seeds each)
    p_value: float | None
    verdict: str


def delta_of_optima(variant: VariantStats, baseline: VariantStats, level: float = LEVEL) -> OptimaDelta | None:
    """Each at the grid point nearest its own lr*: "is the variant, tuned, better than the
    baseline, tuned?" -- the question the paired Δs answer only when both optima share
    a grid point (Table 3's depths and Fig. 2c's T = 2 move to other learning rates)."""
    from scipy.stats import ttest_ind

    lr_v, lr_b = variant.best_grid_lr, baseline.best_grid_lr
    if lr_v is None or lr_b is None:
        return None
    xv = np.asarray(variant.at(lr_v).values, dtype=np.float64)
    xb = np.asarray(baseline.at(lr_b).values, dtype=np.float64)
    delta = float(xv.mean() - xb.mean())
    if len(xv) < 2 or len(xb) < 2:
        return OptimaDelta(lr_v, lr_b, len(xv), len(xb), delta, None, None, UNRESOLVED)
    if np.std(xv) == 0.0 and np.std(xb) == 0.0:  # no spread: scipy's interval is NaN; the point
        interval, p_value = Interval(delta, delta, level, "welch"), (0.0 if delta != 0.0 else 1.0)
    else:
        result = ttest_ind(xv, xb, equal_var=False)
        ci = result.confidence_interval(level)
        interval, p_value = Interval(float(ci.low), float(ci.high), level, "welch"), float(result.pvalue)
    return OptimaDelta(lr_v, lr_b, len(xv), len(xb), delta, interval, p_value, verdict_of(interval))


# -- one variant's statistics, as logged on its parent run and read back by the report -----


@dataclass(frozen=True)
class VariantStatistics:
    """Everything the report says about a variant's seeds: computed once, by the study
    (`study.summary`), logged on the parent run as `stats.json` and read back."""

    objective: str  # the task's metric: "test perplexity", "test RMSE", "recall error"
    stats: VariantStats
    comparisons: dict[str, Comparison]  # baseline name -> paired Δ

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> VariantStatistics:
        def interval(d):
            return Interval(**d) if d else None

        def delta(d):
            if not d:
                return None
            return PairedDelta(**(d | {"seeds": tuple(d["seeds"]), "interval": interval(d["interval"])}))

        stats = data["stats"]
        rows = tuple(LrStats(r["lr"], tuple(r["seeds"]), tuple(r["values"])) for r in stats["by_lr"])
        opt = stats["optimum"]
        optimum = None if opt is None else Optimum(
            AkimaFit.from_dict(opt["fit"]),
            opt["n_seeds"], interval(opt["lr_interval"]), interval(opt["objective_interval"]),
            opt.get("interval_note"))
        comparisons = {name: Comparison(delta(c["at_baseline_optimum"]), delta(c["at_own_optimum"]))
                       for name, c in data["comparisons"].items()}
        return cls(data["objective"], VariantStats(rows, optimum), comparisons)
