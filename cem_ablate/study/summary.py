"""Per-variant results: Akima fit over the finished trials, logged on the parent run.

The one place a variant's fit and seed statistics are computed (`analysis.statistics`):
from the Optuna storage (the trials' recorded values), after every trial of a variant
(by whichever worker finished it) and once more by the coordinator at the end. They go
to the parent run as metrics (lr_akima, ppl_akima, per-lr mean/std/n, lr* and
objective* intervals, paired Δ vs each baseline), tags (edge, verdict, objective name),
and `stats.json` (the statistics, the fit included), which the report reads instead of
computing again. Calling
it twice, or from two workers at once, is harmless.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.analysis.akima import AkimaFit
from cem_ablate.analysis.statistics import (
    OBJECTIVE_NAMES, VariantStatistics, VariantStats, compare, observations, variant_stats)
from cem_ablate.study.trials import DIVERGED, FAILED, FINAL_STATES, FINISHED, PRUNED, TrialPoint
from cem_ablate.study.variants import Variant
from cem_ablate.tracking import tags as T


@dataclass(frozen=True)
class VariantSummary:
    variant: Variant
    points: list[TrialPoint]
    slot_states: dict[str, str]
    fit: AkimaFit | None
    statistics: VariantStatistics

    @property
    def counts(self) -> Counter:
        return Counter(self.slot_states.values())

    @property
    def done(self) -> bool:
        return all(s in FINAL_STATES for s in self.slot_states.values())

    @property
    def best_observed(self) -> TrialPoint | None:
        finished = [p for p in self.points if p.status == FINISHED and p.ppl is not None and math.isfinite(p.ppl)]
        return min(finished, key=lambda p: p.ppl) if finished else None


def _stats(session, key: str, n_resamples: int | None = None) -> VariantStats:
    kwargs = {} if n_resamples is None else {"n_resamples": n_resamples}
    return variant_stats(observations(session.trials[key].points()), session.spec.lr_search.interpolation, **kwargs)


def summarize(session, variant: Variant) -> VariantSummary:
    trials = session.trials[variant.key]
    points = trials.points()
    stats = variant_stats(observations(points), session.spec.lr_search.interpolation)
    # Baselines' statistics only for the comparison: their lr* needs no bootstrap.
    comparisons = {name: compare(stats, _stats(session, key, n_resamples=0))
                   for name, key in variant.baselines.items() if key in session.trials}
    statistics = VariantStatistics(OBJECTIVE_NAMES[variant.config.data.task], stats, comparisons)
    fit = stats.optimum.fit if stats.optimum else None
    return VariantSummary(variant, points, trials.slot_states(), fit, statistics)


def aggregate_metrics(statistics: VariantStatistics) -> dict[str, float | None]:
    """The parent run's aggregates, as MLflow metrics (the UI's table and charts)."""
    stats = statistics.stats
    out: dict[str, float | None] = {"n_seeds": stats.n_seeds}
    for row in stats.by_lr:
        out |= {f"lr_{row.lr:g}/mean": row.mean, f"lr_{row.lr:g}/std": row.std, f"lr_{row.lr:g}/n": row.n}
    opt = stats.optimum
    if opt is not None:
        out |= {"lr_star": opt.lr_star, "objective_star": opt.objective_star}
        if opt.lr_interval is not None:
            out |= {"lr_star_low": opt.lr_interval.low, "lr_star_high": opt.lr_interval.high,
                    "objective_star_low": opt.objective_interval.low,
                    "objective_star_high": opt.objective_interval.high}
    for name, comparison in statistics.comparisons.items():
        for prefix, delta in ((f"delta_vs_{name}", comparison.at_baseline_optimum),
                              (f"delta_own_lr_vs_{name}", comparison.at_own_optimum)):
            if delta is None or delta.delta is None:
                continue
            out |= {prefix: delta.delta, f"{prefix}/lr": delta.lr, f"{prefix}/n": delta.n,
                    f"{prefix}/p_value": delta.p_value, f"{prefix}/seeds_to_resolve": delta.seeds_needed}
            if delta.interval is not None:
                out |= {f"{prefix}/low": delta.interval.low, f"{prefix}/high": delta.interval.high}
    return out


def aggregate_tags(statistics: VariantStatistics) -> dict[str, str]:
    tags = {T.OBJECTIVE: statistics.objective}
    for name, comparison in statistics.comparisons.items():
        tags[T.VERDICT_PREFIX + name] = comparison.verdict
        own = comparison.at_own_optimum
        tags[T.VERDICT_OWN_LR_PREFIX + name] = own.verdict if own is not None else "unresolved"
    return tags


def publish(session, variant: Variant) -> VariantSummary:
    """Fit, draw and log the variant's summary on its parent run."""
    from cem_ablate.study.plots import SweepSeries, plot_variant_fit

    summary = summarize(session, variant)
    counts = summary.counts
    fit = summary.fit
    metrics = {
        "trials_finished": counts[FINISHED], "trials_diverged": counts[DIVERGED],
        "trials_failed": counts[FAILED], "trials_pruned": counts[PRUNED],
        "lr_akima": fit.lr_star if fit else None, "ppl_akima": fit.ppl_star if fit else None,
    }
    best = summary.best_observed
    if best is not None:
        metrics |= {"best_observed_ppl": best.ppl, "best_observed_lr": best.lr}
    metrics |= aggregate_metrics(summary.statistics)
    status = "done" if summary.done else "running"
    optimum = summary.statistics.stats.optimum
    tags = {T.AKIMA_EDGE: (optimum.edge or "none") if optimum else "none", T.PROGRESS: status}
    tags |= aggregate_tags(summary.statistics)
    series = SweepSeries(
        name=variant.name, is_baseline=variant.role == "baseline",
        finished=[(p.lr, p.ppl) for p in summary.points if p.status == FINISHED and p.ppl is not None],
        diverged=[p.lr for p in summary.points if p.status == DIVERGED and p.lr is not None], fit=fit,
        stats=summary.statistics.stats, metric=summary.statistics.objective)
    with tempfile.TemporaryDirectory() as tmp:
        plot = plot_variant_fit(series, Path(tmp) / "akima.png") if series.finished or series.diverged else None
        session.tracker.log_variant_summary(
            session.parent_run_id(variant), metrics, tags, str(plot) if plot else None,
            done=summary.done, step=counts[FINISHED], stats=summary.statistics.to_dict())
    return summary
