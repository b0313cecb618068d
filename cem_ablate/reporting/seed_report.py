"""The statistics part of `cem-ablate report`: text for the table and the markdown.

Reads `VariantStatistics` (computed once by the study, `analysis.statistics`) and the
report's decided comparisons (`study.verdicts`), and formats: the optimum with its
intervals, each comparison's Δ, interval, test, n, p, Holm p and verdict, mean ± std per
learning rate, and the scaling summary. Numbers only; `reporting.report` lays them out.
"""

from __future__ import annotations

import math

from cem_ablate.analysis.decision import PAIRED_T, Decision
from cem_ablate.analysis.scaling import PARAMS, SATURATING, ScalingSummary
from cem_ablate.analysis.statistics import LEVEL, Interval, LrStats, Optimum, VariantStatistics
from cem_ablate.study.verdicts import AT_OPTIMA, Test

DEFINITIONS = (
    "Seeds: every number is over the seeds that finished. mean ± std: sample standard deviation "
    "(n - 1). lr* and {m}*: minimum of the Akima interpolation of the seed-mean {m} over log2(lr) "
    "(docs/design/experiments.md#s8-learning-rate-search), with an interval where its coverage at that number of seeds was checked by simulation, "
    'else "n too small". "edge": the optimum sits at an end of a grid of ≥ 2 learning rates, so lr* '
    "is only a bound."
)

COMPARISONS_DEFINITION = (
    "Δ = variant − baseline ({m}; lower is better), at the grid point nearest (log2 lr) the baseline's lr* "
    '("baseline lr*"), the variant\'s own ("own lr*", where another one) and each at its own '
    '("optima": tuned vs tuned, where those differ). Test: paired t over the seeds both finished where the '
    "platform found the pair paired (identical initial values of every shared parameter and the same data "
    "order under one seed), else Welch's t over every finished seed of each side. Seed design: {design}. "
    "[low, high]: the t-interval at the design's level (95% for one look). p: the test's two-sided p; "
    "Holm p: {correction}. Verdict: better / worse where that p ≤ α = {alpha:g}, else unresolved."
)


def correction_text(correction: str, n_tests: int, design_tests: int, untested: int = 0) -> str:
    """How the verdict's p is corrected, in words; `n_tests`: the comparisons with a test,
    `untested`: those without one (too few seeds on a side), outside the family."""
    looks = f"p × {design_tests} for the design's looks, then " if design_tests > 1 else ""
    apart = f"; {untested} more without a test (too few seeds), unresolved" if untested else ""
    if correction == "holm":
        return f"{looks}Holm-adjusted over the report's {n_tests} tested comparison(s) (one family{apart})"
    return f"{looks}not adjusted for the report's {n_tests} tested comparison(s) (statistics.correction: none{apart})"


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def interval_text(interval: Interval | None, spec: str) -> str:
    return f"[{fmt(interval.low, spec)}, {fmt(interval.high, spec)}]" if interval is not None else ""


def _optimum_interval(optimum: Optimum, interval: Interval | None, spec: str) -> str:
    """The interval where the analysis gives one; where it declines, why ("n too small
    (2 seeds; intervals from 3)"; an lr* on the grid's edge is a bound: "(edge)" says it)."""
    if interval is not None:
        return " " + interval_text(interval, spec)
    note = optimum.interval_note or ("n too small" if optimum.n_seeds >= 1 else None)
    return f", {note}" if note and not note.startswith("lr* at the grid's edge") else ""


def lr_star_text(optimum: Optimum | None) -> str:
    if optimum is None:
        return "-"
    text = fmt(optimum.lr_star, ".3g") + _optimum_interval(optimum, optimum.lr_interval, ".3g")
    return text + (" (edge)" if optimum.edge else "")


def objective_star_text(optimum: Optimum | None) -> str:
    if optimum is None:
        return "-"
    return fmt(optimum.objective_star, ".4g") + _optimum_interval(optimum, optimum.objective_interval, ".4g")


COMPARISON_COLUMNS = ("variant", "vs baseline", "at", "Δ [interval]", "test", "n", "p", "Holm p", "verdict")


def at_text(test: Test) -> str:
    if test.at == AT_OPTIMA:
        return f"optima (lr {test.lr_variant:g} vs {test.lr_baseline:g})"
    return f"{test.at} (lr {test.lr_variant:g})"


def decimals(*values: float | None) -> int:
    """Decimals that write the largest of `values` at 4 significant digits; Δ and its
    interval share them ("+2.176 [+1.998, +2.354]", not "+2.176 [+2, +2.35]")."""
    largest = max((abs(v) for v in values if v is not None and math.isfinite(v) and v != 0), default=0.0)
    return max(0, 3 - math.floor(math.log10(largest))) if largest else 4


def decision_delta_text(d: Decision) -> str:
    """ "-0.4120 [-0.6100, -0.2100]"; the level where it is not 95%; "n too small" without a test."""
    if d.delta is None:
        return "no seeds to compare"
    places = decimals(d.delta, d.low, d.high)
    text = f"{d.delta:+.{places}f}"
    if d.low is None:
        return text + " (n too small)"
    level = f" {d.level:.1%}" if d.level is not None and abs(d.level - 0.95) > 1e-9 else ""
    return text + f" [{d.low:+.{places}f}, {d.high:+.{places}f}]{level}"


def decision_n_text(d: Decision) -> str:
    return f"{d.n_pairs} pairs" if d.test == PAIRED_T else f"{d.n_variant} vs {d.n_baseline}"


def comparison_cells(name: str, baseline: str, test: Test) -> list[str]:
    d = test.decision
    return [
        name,
        baseline,
        at_text(test),
        decision_delta_text(d),
        d.test,
        decision_n_text(d),
        fmt(d.p, ".3g"),
        fmt(d.p_holm, ".3g"),
        d.verdict,
    ]


def mean_std_text(row: LrStats) -> str:
    return f"{row.mean:.4f}" + (f" ± {row.std:.4f}" if row.std is not None else "")


def per_lr_lines(name: str, stats: VariantStatistics) -> list[str]:
    """Markdown rows: variant | lr | seeds | mean ± std | per seed."""
    return [
        f"| {name} | {row.lr:.3g} | {row.n} | {mean_std_text(row)} | {', '.join(f'{v:.4f}' for v in row.values)} |"
        for row in stats.stats.by_lr
    ]


def scaling_lines(summary: ScalingSummary, metric: str) -> list[str]:
    lines = [
        "## Scaling",
        "",
        f"{metric}* (Akima optimum) per family against parameters and training FLOPs (3 × forward "
        "FLOPs/token × tokens), power law per family: `a·(x/x0)^-b + c` with ≥ 4 sizes (c: the "
        "irreducible part), else a log-log line `a·(x/x0)^-b` (too few sizes to identify c). "
        "Multiplier: the variant's own x divided by the x at which its baseline family's law reaches "
        "the variant's objective; < 1 means the variant matches the baseline with fewer parameters "
        "(or FLOPs). No interval on the multiplier: the percentile bootstrap over seeds covered "
        f"85% of simulated multipliers at a stated {LEVEL:.0%} (analysis/scaling.py).",
        "",
        "| family | axis | law | a | b | c | sizes |",
        "|---|---|---|---|---|---|---|",
    ]
    for (family, axis), law in summary.laws.items():
        form = "a·(x/x0)^-b + c" if law.form == SATURATING else "log-log line"
        lines.append(
            f"| {family} | {axis} | {form} | {law.a:.4g} | {law.b:.3g} | {law.c:.4g} | "
            f"{fmt(law.x_range[0], '.3g')}–{fmt(law.x_range[1], '.3g')} |"
        )
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
        rows.append(
            [
                eq.variant,
                eq.baseline_family,
                eq.axis,
                f"{fmt(m, '.3f')} {interval_text(eq.interval, '.3f')}".strip(),
                reading,
            ]
        )
    return rows
