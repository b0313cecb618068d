"""Per-variant results: Akima fit over the finished trials, logged on the parent run.

The one place a variant's fit is computed: from the Optuna storage (the trials'
recorded values), after every trial of a variant (by whichever worker finished it)
and once more by the coordinator at the end. The fit goes to the parent run as
metrics (lr_akima, ppl_akima), the edge tag and `fit.json`, which the report reads
instead of fitting again. Calling it twice, or from two workers at once, is harmless.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.study.akima import AkimaFit, fit_akima
from cem_ablate.study.trials import DIVERGED, FAILED, FINAL_STATES, FINISHED, PRUNED, TrialPoint
from cem_ablate.study.variants import Variant
from cem_ablate.tracking import tags as T


@dataclass(frozen=True)
class VariantSummary:
    variant: Variant
    points: list[TrialPoint]
    slot_states: dict[str, str]
    fit: AkimaFit | None

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


def summarize(session, variant: Variant) -> VariantSummary:
    trials = session.trials[variant.key]
    fit = fit_akima(trials.fit_points(), method=session.spec.lr_search.interpolation)
    return VariantSummary(variant, trials.points(), trials.slot_states(), fit)


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
    status = "done" if summary.done else "running"
    tags = {T.AKIMA_EDGE: (fit.edge or "none") if fit else "none", T.PROGRESS: status}
    series = SweepSeries(
        name=variant.name, is_baseline=variant.role == "baseline",
        finished=[(p.lr, p.ppl) for p in summary.points if p.status == FINISHED and p.ppl is not None],
        diverged=[p.lr for p in summary.points if p.status == DIVERGED and p.lr is not None], fit=fit)
    with tempfile.TemporaryDirectory() as tmp:
        plot = plot_variant_fit(series, Path(tmp) / "akima.png") if series.finished or series.diverged else None
        session.tracker.log_variant_summary(
            session.parent_run_id(variant), metrics, tags, str(plot) if plot else None,
            done=summary.done, step=counts[FINISHED], fit=fit.to_dict() if fit else None)
    return summary
