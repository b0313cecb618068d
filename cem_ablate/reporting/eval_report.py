"""The report's downstream-task section: a study's `eval:` metrics beside perplexity.

Every finished trial of a study with `eval:` has `eval/<task>/<metric>` on its MLflow
child (study/trial_eval.py). The section shows, per variant, each metric's mean over
seeds at the variant's own lr* grid point (the columns), and decides each metric at
exactly the comparison points of the perplexity family (`study.verdicts`: baseline
lr*, own lr*, optima; paired where that test is paired) with the same rule,
`analysis.decision.decide` under the study's seed design, Holm-adjusted as one family
of their own (every metric of every comparison) at the study's alpha. A metric where
higher is better (accuracy) is decided on its negative, so "better" means better
here too; Δ is shown in the metric's own units (variant − baseline).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from cem_ablate.analysis.decision import Decision, adjust, decide
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.reporting.seed_report import fmt
from cem_ablate.tracking.eval_metrics import EVAL_PREFIX
from cem_ablate.tracking.readback import read_run_metrics

LOWER_IS_BETTER = ("perplexity", "bits_per_byte", "loss")  # lm-evaluation-harness's lower-is-better metrics

EvalValues = dict[tuple[str, str], dict[float, dict[int, float]]]  # (variant name, metric) -> lr -> seed -> value


def higher_is_better(metric: str) -> bool:
    return not any(word in metric for word in LOWER_IS_BETTER)


def read_eval_values(records, tracking_uri: str) -> EvalValues:
    trials = [
        (r.name, t)
        for r in records
        for t in r.trials
        if t.status == TrialStatus.FINISHED and t.run_id and t.lr is not None and t.seed is not None
    ]
    metrics = read_run_metrics(tracking_uri, [t.run_id for _, t in trials], EVAL_PREFIX)
    values: EvalValues = defaultdict(lambda: defaultdict(dict))
    for name, t in trials:
        for metric, value in metrics.get(t.run_id, {}).items():
            values[(name, metric)][t.lr][t.seed] = value
    return values


def eval_rows(records, values: EvalValues) -> tuple[list[str], list[list[str]]]:
    """(metrics, one row per variant: name, then each metric's mean at its lr* grid point)."""
    from cem_ablate.analysis.statistics import VariantStatistics

    metrics = sorted({metric for _, metric in values})
    rows = []
    for r in records:
        lr = VariantStatistics.from_dict(r.stats).stats.best_grid_lr if r.stats else None
        cells = [r.name, fmt(lr, ".3g")]
        for metric in metrics:
            seeds = values.get((r.name, metric), {}).get(lr, {}) if lr is not None else {}
            cells.append(f"{sum(seeds.values()) / len(seeds):.4g} (n={len(seeds)})" if seeds else "-")
        rows.append(cells)
    return metrics, rows


# Any: the report's ComparisonRow; report.py imports this module, so importing it back is a cycle.
def eval_tests(comparisons, values: EvalValues, metrics: list[str]) -> list[tuple[Any, str, Decision]]:
    """(comparison row, metric, Decision in the metric's units) for every comparison point."""
    design = comparisons.design
    raw = []
    for row in comparisons.rows:
        test = row.test
        for metric in metrics:
            sign = -1.0 if higher_is_better(metric) else 1.0
            v = values.get((row.variant, metric), {}).get(test.lr_variant, {})
            b = values.get((row.baseline, metric), {}).get(test.lr_baseline, {})
            raw.append(
                (
                    row,
                    metric,
                    sign,
                    decide(
                        {s: sign * x for s, x in v.items()},
                        {s: sign * x for s, x in b.items()},
                        paired=test.paired,
                        design=design,
                    ),
                )
            )
    decided = adjust([d for *_, d in raw], alpha=design.alpha, correction=comparisons.correction)
    out = []
    for (row, metric, sign, _), d in zip(raw, decided):
        flip = {} if sign > 0 else {"delta": _neg(d.delta), "low": _neg(d.high), "high": _neg(d.low)}
        out.append((row, metric, d.__class__(**{**d.to_dict(), **flip})))
    return out


def _neg(x):
    return None if x is None else 0.0 - x  # 0.0 - 0.0 is 0.0, not -0.0


def eval_section(records, comparisons, tracking_uri: str, console=None) -> list[str]:
    """Markdown lines of the section ([] when no trial has eval metrics); printed too."""
    values = read_eval_values(records, tracking_uri)
    if not values:
        return []
    metrics, rows = eval_rows(records, values)
    header = ["variant", "lr*", *[m[len(EVAL_PREFIX) :] for m in metrics]]
    lines = [
        "## Downstream tasks (lm-evaluation-harness)",
        "",
        "Mean over seeds at each variant's lr* grid point (n: seeds scored).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    tests = eval_tests(comparisons, values, metrics)
    if tests:
        cols = ["variant", "baseline", "metric", "at", "Δ [interval]", "p (adjusted)", "verdict"]
        lines += [
            "",
            f"### Δ vs baseline, eval metrics ({len(tests)} test{'s' if len(tests) != 1 else ''}, one family, "
            f"{comparisons.correction} at α = {comparisons.design.alpha})",
            "",
            "Δ = variant − baseline in the metric's units; better/worse by the metric's own direction "
            "(higher accuracy, lower perplexity).",
            "",
            "| " + " | ".join(cols) + " |",
            "|" + "---|" * len(cols),
        ]
        for row, metric, d in tests:
            interval = (
                f"{fmt(d.delta, '+.4g')} [{fmt(d.low, '+.4g')}, {fmt(d.high, '+.4g')}]"
                if d.low is not None
                else fmt(d.delta, "+.4g")
            )
            lines.append(
                f"| {row.variant} | {row.baseline} | {metric[len(EVAL_PREFIX) :]} | {row.test.at} | "
                f"{interval} | {fmt(d.p_final, '.3g')} | {d.verdict} |"
            )
    if console is not None:
        for line in lines:
            console.print(line, markup=False, highlight=False)
    return lines
