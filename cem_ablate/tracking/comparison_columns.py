"""The study's answer in MLflow's runs table: a few short, rounded columns per parent run.

The parents' full-precision metrics (`delta_vs_<baseline>`, `.../p_holm`, `.../low`, ...)
are what the report and `readback` use, and `stats.json` holds everything. Their names
do not fit MLflow 3.17's 100 px columns (`delta_vs_llama/p_holm` is cut to
`delta_vs_llama/`) and their values print unrounded (`-0.1489362…`). So each parent also
carries the display columns below, which the runs table shows whole: per baseline `<b>` of
the variant, the headline test (both sides at the baseline's lr* grid point, `study.verdicts`), values at
4 significant digits, names short enough for their header:

    Δ <b>          metric  Δ = variant − baseline (the objective is minimized: < 0 is better)
    CI <b>         tag     Δ's interval "[low, high]" (3 significant digits; its level is the
                           seed design's, 95 % for a fixed list of seeds: stats.json, report)
    Holm p <b>     metric  the p the verdict uses (`statistics.correction: none`: "design p <b>",
                           corrected only for the seed design's looks)
    verdict <b>    tag     better / worse / unresolved
    p <b>          metric  the test's raw two-sided p
    lr opt         metric  the Akima lr* (the paper's star: MLflow refuses `*` in a name)
    <obj> opt      metric  objective* at lr*: `ppl opt`, `RMSE opt`, `recall err opt`

MLflow names may hold letters (any script, so Δ), digits, `_ - . / :` and spaces.
`view_columns` gives the runs-table columns in reading order for `tracking.ui_app`,
which opens the experiment on them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass

SIGNIFICANT = 4  # digits of a display metric: enough to compare, short enough for the column
INTERVAL_SIGNIFICANT = 3  # digits of each end of the CI tag: the interval fits its column
ADJUSTED = {"holm": "Holm p", "none": "design p"}  # statistics.correction -> the adjusted p's name
LR_OPT = "lr opt"
OPT_SUFFIX = " opt"
NO_VALUE = "-"


# The widest value a column usually shows (4 significant digits; the interval at 3): the
# UI sizes a column for it before the study has logged its values (`tracking.ui_app`).
WIDE_NUMBER = "-0.001234"
WIDE_INTERVAL = "[-0.0123, 0.00456]"
WIDE_VERDICT = "unresolved"


def delta_name(baseline: str) -> str:
    return f"Δ {baseline}"


def interval_name(baseline: str) -> str:
    return f"CI {baseline}"


def adjusted_name(baseline: str, correction: str) -> str:
    return f"{ADJUSTED[correction]} {baseline}"


def verdict_name(baseline: str) -> str:
    return f"verdict {baseline}"


def p_name(baseline: str) -> str:
    return f"p {baseline}"


def objective_name(objective_short: str) -> str:
    return objective_short + OPT_SUFFIX


def rounded(value: float | None, digits: int = SIGNIFICANT) -> float | None:
    """`value` at `digits` significant digits (None for a missing or non-finite value)."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def interval_text(low: float | None, high: float | None) -> str:
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return NO_VALUE
    # "#": trailing zeros kept, both ends at one precision ("[1.00, 3.35]", not "[1, 3.35]")
    ends = (f"{x:#.{INTERVAL_SIGNIFICANT}g}".rstrip(".") for x in (low, high))
    return "[{}, {}]".format(*ends)


@dataclass(frozen=True)
class BaselineAnswer:
    """One baseline's headline test, as plain numbers (None: no test yet)."""

    baseline: str
    delta: float | None
    low: float | None
    high: float | None
    p: float | None
    p_adjusted: float | None
    verdict: str


def display_record(
    answers: Iterable[BaselineAnswer],
    correction: str,
    objective_short: str,
    lr_star: float | None,
    objective_star: float | None,
) -> tuple[dict[str, float | None], dict[str, str]]:
    """The display metrics and tags of one parent run (metrics None: not logged)."""
    metrics: dict[str, float | None] = {
        LR_OPT: rounded(lr_star),
        objective_name(objective_short): rounded(objective_star),
    }
    tags: dict[str, str] = {}
    for a in answers:
        metrics |= {
            delta_name(a.baseline): rounded(a.delta),
            adjusted_name(a.baseline, correction): rounded(a.p_adjusted),
            p_name(a.baseline): rounded(a.p),
        }
        tags |= {interval_name(a.baseline): interval_text(a.low, a.high), verdict_name(a.baseline): a.verdict}
    return metrics, tags


def view_columns(baselines: Iterable[str], metric_keys: Collection[str], tag_keys: Collection[str]) -> list[str]:
    """The runs-table columns (MLflow's column ids) of the display record, in reading
    order: per baseline Δ, CI, adjusted p and verdict (the answer), then objective* and
    lr*, then the raw p per baseline.

    A baseline's columns are listed before their first value is logged (a browser stores
    the view on its first visit, maybe while the study's first trials train; MLflow
    ignores a chosen column no run has yet), as long as some parent already carries a
    display column: a study published before them gets no view. The adjusted p is the
    one logged (Holm or design), both while neither is; objective* once logged."""
    baselines = list(baselines)
    display = {verdict_name(b) for b in baselines} | {LR_OPT}
    if not display & (set(metric_keys) | set(tag_keys)):
        return []
    adjusted = [n for n in ADJUSTED.values() if any(k == f"{n} {b}" for b in baselines for k in metric_keys)]
    adjusted = adjusted or list(ADJUSTED.values())
    columns: list[str] = []
    for b in baselines:
        columns += [
            f"metrics.`{delta_name(b)}`",
            f"tags.`{interval_name(b)}`",
            *(f"metrics.`{n} {b}`" for n in adjusted),
            f"tags.`{verdict_name(b)}`",
        ]
    columns += [f"metrics.`{k}`" for k in sorted(metric_keys) if k.endswith(OPT_SUFFIX) and k != LR_OPT]
    columns += [f"metrics.`{LR_OPT}`"] + [f"metrics.`{p_name(b)}`" for b in baselines]
    return columns


def wide_value(column: str) -> str:
    """The usual widest value of a `view_columns` column."""
    key = column.split(".", 1)[1].strip("`")
    if column.startswith("metrics."):
        return WIDE_NUMBER
    return WIDE_INTERVAL if key.startswith(interval_name("")) else WIDE_VERDICT
