"""Per-variant results on the parent runs, published by the coordinator.

The coordinator (`study.coordinator`) owns one `StudyPublisher` per study run and calls
`publish()` whenever trials may have ended (after each trial in process, on each
progress change with workers, once at the end): workers only train and record trials.
Per variant, when its trials changed: the seed statistics and Akima fit
(`analysis.statistics`, its bootstrap included), the sweep plot and `stats.json` (the
statistics, the pairing with each baseline, the seed design: what the report reads
instead of computing again). Every time, for every variant whose numbers moved: the
verdicts of the study's family of comparisons (`study.verdicts`: one decision rule,
Holm over the whole study, so one variant's new seed can change another's adjusted p)
as parent metrics (Δ, interval, p, Holm p per baseline) and tags (verdict, pairing).
Calling it twice, or from two coordinators at once, is harmless.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.analysis.akima import AkimaFit
from cem_ablate.analysis.statistics import OBJECTIVE_NAMES, VariantStatistics, VariantStats, observations, variant_stats
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import FINAL_STATES, TrialStatus
from cem_ablate.study.display_columns import display_columns
from cem_ablate.study.pairing import Pairing
from cem_ablate.study.publication import PairingRecord, VariantPublication
from cem_ablate.study.session_protocols import StudyOfVariants
from cem_ablate.study.variants import Variant
from cem_ablate.study.verdicts import (
    AT_BASELINE,
    AT_OPTIMA,
    AT_OWN,
    Test,
    design_of,
    design_record,
    headline,
    study_family,
)
from cem_ablate.tracking import tags as T

# Metric prefixes of the tests, per baseline name (the UI's columns use the first).
PREFIXES = {AT_BASELINE: "delta_vs_{}", AT_OWN: "delta_own_lr_vs_{}", AT_OPTIMA: "delta_optima_vs_{}"}


@dataclass(frozen=True)
class VariantSummary:
    variant: Variant
    points: list[TrialRecord]
    slot_states: dict[str, TrialStatus]
    fit: AkimaFit | None
    statistics: VariantStatistics

    @property
    def counts(self) -> Counter:
        return Counter(self.slot_states.values())

    @property
    def done(self) -> bool:
        return all(s in FINAL_STATES for s in self.slot_states.values())

    @property
    def best_observed(self) -> TrialRecord | None:
        finished = [
            p
            for p in self.points
            if p.status == TrialStatus.FINISHED and p.value is not None and math.isfinite(p.value)
        ]
        # every value is set (filtered above); math.inf only narrows the type
        return min(finished, key=lambda p: p.value if p.value is not None else math.inf) if finished else None


def test_metrics(tests: list[Test], variant_key: str, baseline: str) -> dict[str, float | None]:
    """One baseline's tests as parent metrics: Δ, lr, n per side, p, Holm p, interval."""
    out: dict[str, float | None] = {}
    for at, prefix in PREFIXES.items():
        test = next((t for t in tests if t.variant == variant_key and t.baseline == baseline and t.at == at), None)
        if test is None or test.decision.delta is None:
            continue
        d, p = test.decision, prefix.format(baseline)
        out |= {
            p: d.delta,
            f"{p}/lr": test.lr_variant,
            f"{p}/n_variant": d.n_variant,
            f"{p}/n_baseline": d.n_baseline,
            f"{p}/paired": float(test.paired),
            f"{p}/p_value": d.p,
            f"{p}/p_holm": d.p_holm,
            f"{p}/low": d.low,
            f"{p}/high": d.high,
        }
    return out


def aggregate_metrics(stats: VariantStats) -> dict[str, float | None]:
    """The parent run's seed aggregates, as MLflow metrics (the UI's table and charts)."""
    out: dict[str, float | None] = {"n_seeds": stats.n_seeds}
    for row in stats.by_lr:
        out |= {f"lr_{row.lr:g}/mean": row.mean, f"lr_{row.lr:g}/std": row.std, f"lr_{row.lr:g}/n": row.n}
    opt = stats.optimum
    if opt is not None:
        out |= {"lr_star": opt.lr_star, "objective_star": opt.objective_star}
        if opt.lr_interval is not None:
            out |= {"lr_star_low": opt.lr_interval.low, "lr_star_high": opt.lr_interval.high}
        if opt.objective_interval is not None:
            out |= {
                "objective_star_low": opt.objective_interval.low,
                "objective_star_high": opt.objective_interval.high,
            }
    return out


def verdict_tags(tests: list[Test], variant: Variant, pairings: Mapping) -> dict[str, str]:
    tags = {}
    for name in variant.baselines:
        main, own = headline(tests, variant.key, name), headline(tests, variant.key, name, AT_OWN)
        tags[T.VERDICT_PREFIX + name] = main.decision.verdict if main is not None else "unresolved"
        tags[T.VERDICT_OWN_LR_PREFIX + name] = own.decision.verdict if own is not None else "unresolved"
        if (variant.key, name) in pairings:
            tags[T.PAIRING_PREFIX + name] = pairings[(variant.key, name)].label
    return tags


class StudyPublisher:
    """The study's parent runs, kept current by the coordinator.

    `pairings`: (variant key, baseline name) -> `study.pairing.Pairing`, checked once
    per study run. Statistics are cached per variant on its finished observations, so a
    variant whose trials did not change is not refitted (nor its bootstrap redrawn).
    """

    def __init__(self, session: StudyOfVariants, pairings: Mapping[tuple[str, str], Pairing]) -> None:
        self.session = session
        self.pairings = dict(pairings)
        spec = session.spec
        self.design = design_of(spec.seeds, spec.statistics)
        self.correction = spec.statistics.correction
        self._points: dict[str, list[TrialRecord]] = {}
        self._stats: dict[str, tuple[tuple, VariantStats]] = {}
        self._logged: dict[str, tuple] = {}

    def _variant_stats(self, key: str, points: list[TrialRecord]) -> VariantStats:
        obs = tuple(observations(points))
        cached = self._stats.get(key)
        if cached is None or cached[0] != obs:
            cached = (obs, variant_stats(obs, self.session.spec.lr_search.interpolation))
            self._stats[key] = cached
        return cached[1]

    def _family(self, stats: Mapping[str, VariantStats]) -> list[Test]:
        return study_family(self.session.variants, stats, self.pairings, self.design, self.correction)

    def publish(self) -> list[VariantSummary]:
        """Log every variant whose trials or verdicts changed since the last call."""
        session = self.session
        points = {v.key: session.trials[v.key].points() for v in session.variants}
        stats = {key: self._variant_stats(key, pts) for key, pts in points.items()}
        tests = self._family(stats)
        out = []
        for variant in session.variants:
            changed = points[variant.key] != self._points.get(variant.key)
            summary = self._summary(variant, points[variant.key], stats[variant.key])
            metrics, tags = self._parent_record(summary, tests)
            if not changed and self._logged.get(variant.key) == (metrics, tags):
                continue
            self._log(summary, metrics, tags, draw=changed)
            self._points[variant.key] = points[variant.key]
            self._logged[variant.key] = (metrics, tags)
            out.append(summary)
        return out

    def _summary(self, variant: Variant, points: list[TrialRecord], stats: VariantStats) -> VariantSummary:
        statistics = VariantStatistics(OBJECTIVE_NAMES[variant.config.data.task], stats, {})
        fit = stats.optimum.fit if stats.optimum else None
        return VariantSummary(variant, points, self.session.trials[variant.key].slot_states(), fit, statistics)

    def _parent_record(self, summary: VariantSummary, tests: list[Test]) -> tuple[dict, dict]:
        counts, fit, variant = summary.counts, summary.fit, summary.variant
        metrics = {
            "trials_finished": counts[TrialStatus.FINISHED],
            "trials_diverged": counts[TrialStatus.DIVERGED],
            "trials_failed": counts[TrialStatus.FAILED],
            "trials_pruned": counts[TrialStatus.PRUNED],
            "lr_akima": fit.lr_star if fit else None,
            "ppl_akima": fit.ppl_star if fit else None,
        }
        best = summary.best_observed
        if best is not None:
            metrics |= {"best_observed_ppl": best.value, "best_observed_lr": best.lr}
        metrics |= aggregate_metrics(summary.statistics.stats)
        for name in variant.baselines:
            metrics |= test_metrics(tests, variant.key, name)
        optimum = summary.statistics.stats.optimum
        tags = {
            T.AKIMA_EDGE: (optimum.edge or "none") if optimum else "none",
            T.PROGRESS: "done" if summary.done else "running",
            T.OBJECTIVE: summary.statistics.objective,
        }
        tags |= verdict_tags(tests, variant, self.pairings)
        display_metrics, display_tags = display_columns(tests, variant, summary.statistics.stats, self.correction)
        return metrics | display_metrics, tags | display_tags

    def _log(self, summary: VariantSummary, metrics: dict, tags: dict, draw: bool) -> None:
        from cem_ablate.figures.plots import SweepSeries, plot_variant_fit, study_colors

        variant, session = summary.variant, self.session
        record = VariantPublication(
            summary.statistics,
            {name: PairingRecord(p.paired, p.reason) for (key, name), p in self.pairings.items() if key == variant.key},
            design_record(self.design, self.correction),
        ).to_stats()
        series = SweepSeries(
            name=variant.name,
            is_baseline=variant.role == "baseline",
            finished=[
                (p.lr, p.value)
                for p in summary.points
                if p.status == TrialStatus.FINISHED and p.lr is not None and p.value is not None
            ],
            diverged=[p.lr for p in summary.points if p.status == TrialStatus.DIVERGED and p.lr is not None],
            fit=summary.fit,
            stats=summary.statistics.stats,
            metric=summary.statistics.objective,
        )
        with tempfile.TemporaryDirectory() as tmp:
            plot = None
            if draw and (series.finished or series.diverged):
                color = study_colors(session.expanded.variants).get(
                    str(variant.axis_values.get("variant", variant.name))
                )
                plot = plot_variant_fit(series, Path(tmp) / "akima.png", color)
            session.tracker.log_variant_summary(
                session.parent_run_id(variant),
                metrics,
                tags,
                str(plot) if plot else None,
                done=summary.done,
                step=summary.counts[TrialStatus.FINISHED],
                stats=record if draw else None,
            )
