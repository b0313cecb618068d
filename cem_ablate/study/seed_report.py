"""The statistics part of `cem-ablate report`: text for the table and the markdown.

Reads `VariantStatistics` (computed once by the study, `analysis.statistics`) and formats:
the optimum with its intervals, the paired Δ with interval and verdict, mean ± std per
learning rate, and the scaling summary. Numbers only; `study.report` lays them out.
"""

from __future__ import annotations

import math

from cem_ablate.analysis.scaling import PARAMS, SATURATING, ScalingSummary
from cem_ablate.analysis.statistics import (
    LEVEL, Interval, LrStats, OptimaDelta, Optimum, PairedDelta, VariantStatistics)

DEFINITIONS = (
    "Seeds: every number is over the seeds that finished. mean ± std: sample standard deviation "
    "(n - 1). lr* and {m}*: minimum of the Akima interpolation of the seed-mean {m} over log2(lr) "
    "(SPEC §8); [low, high]: 95% percentile bootstrap over seeds, refitted per resample (≥ 2 seeds). "
    "\"edge\": the optimum sits at an end of a grid of ≥ 2 learning rates, so lr* is only a bound. "
    "Δ: paired difference variant − baseline over the seeds both finished at the same learning rate, "
    "at the grid point nearest (in log2 lr) the baseline's lr* (\"at baseline lr*\") and at the one "
    "nearest the variant's own lr* (\"at own lr*\"); [low, high]: 95% t-interval (scipy.stats.ttest_rel). "
    "Verdict: better / worse when the interval excludes 0 (lower {m} is better), else unresolved. "
    "\"seeds to resolve\": smallest n whose t-interval half-width t(0.975, n-1)·sd/√n falls below |Δ| "
    "at the observed spread sd of the differences.")


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def interval_text(interval: Interval | None, spec: str) -> str:
    return f"[{fmt(interval.low, spec)}, {fmt(interval.high, spec)}]" if interval is not None else ""


def lr_star_text(optimum: Optimum | None) -> str:
    if optimum is None:
        return "-"
    text = fmt(optimum.lr_star, ".3g")
    if optimum.lr_interval is not None:
        text += " " + interval_text(optimum.lr_interval, ".3g")
    return text + (" (edge)" if optimum.edge else "")


def objective_star_text(optimum: Optimum | None) -> str:
    if optimum is None:
        return "-"
    return (fmt(optimum.objective_star, ".4g") + " " + interval_text(optimum.objective_interval, ".4g")).strip()


def delta_text(delta: PairedDelta | None) -> str:
    """"-0.412 [-0.61, -0.21] at lr 0.002 (n=3)"; "no paired seeds at lr 0.004"."""
    if delta is None:
        return "-"
    if delta.delta is None:
        return f"no paired seeds at lr {delta.lr:g}"
    text = f"{delta.delta:+.4g}"
    if delta.interval is not None:
        text += " " + interval_text(delta.interval, "+.3g")
    return text + f" at lr {delta.lr:g} (n={delta.n})"


OPTIMA_DEFINITION = (
    "Each at the grid point nearest its own lr*: Δ = mean(variant) − mean(baseline) at possibly "
    "different learning rates, so the seeds are not paired; [low, high]: 95% Welch t-interval "
    "(scipy.stats.ttest_ind, unequal variances). It answers \"tuned vs tuned\" where the paired Δs "
    "above compare both at one learning rate.")
OPTIMA_COLUMNS = ("variant", "vs baseline", "variant at lr (n)", "baseline at lr (n)", "Δ of optima [95%]",
                  "verdict")


def optima_cells(name: str, baseline: str, d: OptimaDelta) -> list[str]:
    text = f"{d.delta:+.4g}" + (" " + interval_text(d.interval, "+.3g") if d.interval is not None else "")
    return [name, baseline, f"{d.variant_lr:g} ({d.n_variant})", f"{d.baseline_lr:g} ({d.n_baseline})", text,
            d.verdict]


def seeds_to_resolve_text(delta: PairedDelta | None) -> str:
    if delta is None or delta.delta is None:
        return "-"
    if delta.resolved:
        return "resolved"
    if delta.seeds_needed is None:
        return "Δ = 0" if delta.delta == 0 else ("needs ≥ 2 seeds" if delta.n < 2 else "> 100,000")
    return f"~{delta.seeds_needed}"


def mean_std_text(row: LrStats) -> str:
    return f"{row.mean:.4f}" + (f" ± {row.std:.4f}" if row.std is not None else "")


def per_lr_lines(name: str, stats: VariantStatistics) -> list[str]:
    """Markdown rows: variant | lr | seeds | mean ± std | per seed."""
    return [f"| {name} | {row.lr:.3g} | {row.n} | {mean_std_text(row)} | "
            f"{', '.join(f'{v:.4f}' for v in row.values)} |" for row in stats.stats.by_lr]


def scaling_lines(summary: ScalingSummary, metric: str) -> list[str]:
    lines = ["## Scaling", "",
             f"{metric}* (Akima optimum) per family against parameters and training FLOPs (3 × forward "
             "FLOPs/token × tokens), power law per family: `a·(x/x0)^-b + c` with ≥ 4 sizes (c: the "
             "irreducible part), else a log-log line `a·(x/x0)^-b` (too few sizes to identify c). "
             "Multiplier: the variant's own x divided by the x at which its baseline family's law reaches "
             "the variant's objective; < 1 means the variant matches the baseline with fewer parameters "
             f"(or FLOPs). Intervals: {LEVEL:.0%} percentile bootstrap over each variant's seeds, "
             "optima and laws refitted per resample.", "",
             "| family | axis | law | a | b | c | sizes |", "|---|---|---|---|---|---|---|"]
    for (family, axis), law in summary.laws.items():
        form = "a·(x/x0)^-b + c" if law.form == SATURATING else "log-log line"
        lines.append(f"| {family} | {axis} | {form} | {law.a:.4g} | {law.b:.3g} | {law.c:.4g} | "
                     f"{fmt(law.x_range[0], '.3g')}–{fmt(law.x_range[1], '.3g')} |")
    lines += ["", "| variant | vs family | axis | multiplier [95%] | reading |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in equivalence_rows(summary)]
    return lines + [""]



def equivalence_rows(summary: ScalingSummary) -> list[list[str]]:
    """variant | vs family | axis | multiplier [95%] | reading."""
    rows = []
    for eq in summary.equivalences:
        m = eq.multiplier
        if m is None:
            reading = f"not reached by the {eq.baseline_family} law"
        else:
            what = "the parameters" if eq.axis == PARAMS else "the training FLOPs"
            reading = f"matches {eq.baseline_family} at {m:.2f}× {what}"
            if summary.extrapolated(eq):
                reading += " (extrapolated beyond the sampled sizes)"
        rows.append([eq.variant, eq.baseline_family, eq.axis,
                     f"{fmt(m, '.3f')} {interval_text(eq.interval, '.3f')}".strip(), reading])
    return rows
