"""The study report: a table (printed with rich), markdown and paper-style figures.

Everything is read back from MLflow (`tracking.readback`): parent runs carry the
parameter counts and the seed statistics with the fit and the verdicts (`stats.json`),
computed once by `study.summary`: the report never fits again; child
runs carry each trial's status and final metric. The task's metric is named
throughout (test perplexity, test RMSE, recall error). Only the scaling summary of a
study with a size axis is computed here, from the logged optima (`analysis.scaling`).

    reports/<study>/report.md
    reports/<study>/ppl_vs_params.png   (Fig. 2 style: objective* vs parameters)
    reports/<study>/ppl_vs_lr.png       (Fig. 3a style: objective vs learning rate)
    reports/<study>/scaling.png         (a size axis: power laws per family)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cem_ablate.analysis.scaling import ScalingInput, ScalingSummary, has_size_axis, summarize_scaling
from cem_ablate.analysis.statistics import Comparison, VariantStatistics, delta_of_optima
from cem_ablate.study.plots import SweepSeries, plot_ppl_vs_lr, plot_ppl_vs_params, plot_scaling
from cem_ablate.study.seed_report import (
    DEFINITIONS, OPTIMA_COLUMNS, OPTIMA_DEFINITION, delta_text, equivalence_rows, fmt, lr_star_text, mean_std_text,
    objective_star_text, optima_cells, per_lr_lines, scaling_lines, seeds_to_resolve_text)
from cem_ablate.tracking.readback import VariantRecord


@dataclass(frozen=True)
class ReportRow:
    name: str
    role: str
    params: int | None
    statistics: VariantStatistics | None  # as logged by the study (stats.json)
    baseline: str | None  # name of the baseline variant
    comparison: Comparison | None  # paired Δ vs that baseline
    status: str
    tokens: float | None
    is_baseline: bool = False  # some variant is compared against this one
    repeated: bool = False  # the variant's second (third, ...) baseline: its optima are on the row above

    @property
    def optimum(self):
        return self.statistics.stats.optimum if self.statistics is not None else None


def _status_text(record: VariantRecord, statistics: VariantStatistics | None) -> str:
    counts: dict[str, int] = {}
    for trial in record.trials:
        counts[trial.status] = counts.get(trial.status, 0) + 1
    total = len(record.trials)
    parts = [f"{counts.get('finished', 0)}/{total} finished"]
    parts += [f"{counts[s]} {s}" for s in ("diverged", "failed", "pruned", "running") if counts.get(s)]
    optimum = statistics.stats.optimum if statistics is not None else None
    if optimum is not None and optimum.edge:  # a one-point grid has no edge
        parts.append(f"lr* at {optimum.edge} edge")
    return ", ".join(parts)


def baseline_keys(records: list[VariantRecord]) -> set[str]:
    return {key for r in records for key in r.baselines.values()} | {r.key for r in records if r.role == "baseline"}


def _statistics(record: VariantRecord) -> VariantStatistics | None:
    return VariantStatistics.from_dict(record.stats) if record.stats else None


def _baselines(record: VariantRecord, by_key: dict[str, VariantRecord]) -> list[tuple[str, VariantRecord]]:
    """The record's baselines present in the report, with their names in the study file,
    in the study file's order."""
    return [(name, by_key[k]) for name, k in record.baselines.items() if k in by_key]


def build_rows(records: list[VariantRecord]) -> list[ReportRow]:
    """One row per variant and baseline it is compared with (a study may name several,
    e.g. Llama and the same layer at T = 1): the first row of a variant carries it, the
    others (`repeated`) only add their paired Δ."""
    by_key = {r.key: r for r in records}
    baselines = baseline_keys(records)
    rows = []
    for r in records:
        statistics = _statistics(r)
        pairs = _baselines(r, by_key) or [None]
        for i, base in enumerate(pairs):
            comparison = statistics.comparisons.get(base[0]) if statistics is not None and base else None
            rows.append(ReportRow(r.name, r.role, r.params_total, statistics, base[1].name if base else None,
                                  comparison, _status_text(r, statistics), r.metrics.get("tokens_per_trial"),
                                  r.key in baselines, repeated=i > 0))
    return rows


def optima_rows(records: list[VariantRecord]) -> list[list[str]]:
    """Cells of the "each at its own optimum" comparison, one row per variant and baseline."""
    by_key = {r.key: r for r in records}
    out = []
    for r in records:
        mine = _statistics(r)
        for _, base in _baselines(r, by_key):
            theirs = _statistics(base)
            d = delta_of_optima(mine.stats, theirs.stats) if mine is not None and theirs is not None else None
            if d is not None:
                out.append(optima_cells(r.name, base.name, d))
    return out


def metric_of(rows: list[ReportRow]) -> str:
    """The study's objective, named (every variant of a study has the same task)."""
    return next((r.statistics.objective for r in rows if r.statistics is not None), "test perplexity")


def columns(metric: str) -> tuple[str, ...]:
    return ("variant", "parameters", "seeds", "lr* [95%]", f"{metric} at lr* [95%]",
            "Δ at baseline lr* [95%]", "verdict", "Δ at own lr* [95%]", "seeds to resolve", "status")


def row_cells(row: ReportRow) -> list[str]:
    cmp = row.comparison
    main = cmp.at_baseline_optimum if cmp is not None else None
    own = cmp.at_own_optimum if cmp is not None else None
    if cmp is None:
        delta, verdict, own_text = ("(baseline)" if row.is_baseline else "-"), "-", "-"
    else:
        delta = delta_text(main) + f" vs {row.baseline}"
        verdict = cmp.verdict + (f" (own lr*: {own.verdict})" if own is not None and own.verdict != cmp.verdict
                                 else "")
        own_text = delta_text(own)
    n_seeds = str(row.statistics.stats.n_seeds) if row.statistics is not None else "-"
    # A second baseline's row names its comparison, so that every row's first cell is
    # unique (one variant, one row per baseline; a reader keyed by name keeps the first).
    name = f"{row.name} (vs {row.baseline})" if row.repeated else row.name
    return [name, fmt(row.params, ","), n_seeds, lr_star_text(row.optimum), objective_star_text(row.optimum),
            delta, verdict, own_text, seeds_to_resolve_text(main), row.status]


def print_table(rows: list[ReportRow], title: str, console=None) -> None:
    """Three tables on the terminal (one wide row would wrap): optima, Δ and verdicts,
    mean ± std per learning rate. The markdown has the first two as one table."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    metric = metric_of(rows)
    cols = columns(metric)
    groups = ((title, (0, 1, 2, 3, 4, 9)), (f"{title}: paired Δ vs baseline ({metric})", (0, 5, 6, 7, 8)))
    for caption, picked in groups:
        table = Table(title=caption, title_justify="left")
        for i in picked:
            table.add_column(cols[i], justify="right" if cols[i] in ("parameters", "seeds") else "left")
        for row in rows:
            cells = row_cells(row)
            table.add_row(*(cells[i] for i in picked))
        console.print(table)
    per_lr = Table(title=f"{metric}: mean ± std over seeds per learning rate", title_justify="left")
    for col in ("variant", "lr", "seeds", "mean ± std"):
        per_lr.add_column(col, justify="left" if col == "variant" else "right")
    for row in rows:
        for lr_row in row.statistics.stats.by_lr if row.statistics is not None and not row.repeated else ():
            per_lr.add_row(row.name, f"{lr_row.lr:.3g}", str(lr_row.n), mean_std_text(lr_row))
    console.print(per_lr)


def print_optima(records: list[VariantRecord], metric: str, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = optima_rows(records)
    if not rows:
        return
    table = Table(title=f"Δ of the optima: each at its own best learning rate ({metric}, unpaired)",
                  title_justify="left")
    for col in OPTIMA_COLUMNS:
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    (console or Console()).print(table)


def series_for(records: list[VariantRecord]) -> list[SweepSeries]:
    by_key = {r.key: r for r in records}
    baselines = baseline_keys(records)
    out = []
    for r in records:
        finished = [(t.lr, t.ppl) for t in r.trials if t.status == "finished" and t.lr and t.ppl is not None]
        base = next(iter(_baselines(r, by_key)), None)  # plots and scaling: the first baseline
        statistics = _statistics(r)
        out.append(SweepSeries(
            name=r.name, is_baseline=r.key in baselines,
            finished=finished, diverged=[t.lr for t in r.trials if t.status == "diverged" and t.lr],
            fit=statistics.stats.optimum.fit if statistics is not None and statistics.stats.optimum else None,
            params=r.params_total,
            tokens=r.metrics.get("tokens_per_trial"), group=r.labels.get("model.size", ""),
            baseline_name=base[1].name if base else None,
            stats=statistics.stats if statistics is not None else None,
            metric=statistics.objective if statistics is not None else "test perplexity"))
    return out


def scaling_inputs(records: list[VariantRecord]) -> list[ScalingInput]:
    """Families are the study file's variant names (the `variant` label) across sizes."""
    by_key = {r.key: r for r in records}
    out = []
    for r in records:
        statistics = _statistics(r)
        tokens, flops = r.metrics.get("tokens_per_trial"), r.metrics.get("train_flops_per_token")
        if statistics is None or statistics.stats.optimum is None or not r.params_total or not tokens or not flops:
            continue
        base = next(iter(_baselines(r, by_key)), None)  # plots and scaling: the first baseline
        family = r.labels.get("variant", r.name)
        out.append(ScalingInput(r.name, family, base[1].labels.get("variant", base[1].name) if base else None,
                                float(r.params_total), float(tokens * flops), statistics.stats,
                                statistics.stats.optimum.fit.method))
    return out


def write_report(records: list[VariantRecord], study_name: str, out_dir: Path,
                 scaling: ScalingSummary | None = None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = build_rows(records)
    metric = metric_of(rows)
    series = series_for(records)
    fig2 = plot_ppl_vs_params(series, out_dir / "ppl_vs_params.png", title=f"{study_name}: {metric} vs parameters")
    fig3 = plot_ppl_vs_lr(series, out_dir / "ppl_vs_lr.png", title=f"{study_name}: {metric} vs learning rate")
    cols = columns(metric)
    lines = [f"# Study `{study_name}`", "", DEFINITIONS.format(m=metric), "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row_cells(row)) + " |" for row in rows]
    lines += ["", f"## {metric}: mean ± std over seeds per learning rate", "",
              "| variant | lr | seeds | mean ± std | per seed |", "|---|---|---|---|---|"]
    for row in rows:
        if row.statistics is not None and not row.repeated:
            lines += per_lr_lines(row.name, row.statistics)
    # after the per-lr table: the first two tables keep their places (optima, mean ± std)
    if optima := optima_rows(records):
        lines += ["", f"## Δ of the optima: each at its own best learning rate ({metric}, unpaired)", "",
                  OPTIMA_DEFINITION, "", "| " + " | ".join(OPTIMA_COLUMNS) + " |", "|" + "---|" * len(OPTIMA_COLUMNS)]
        lines += ["| " + " | ".join(cells) + " |" for cells in optima]
    figures = [f"![{metric} vs parameters]({fig2.name})", "", f"![{metric} vs learning rate]({fig3.name})", ""]
    if scaling is not None:
        lines += [""] + scaling_lines(scaling, metric)
        fig4 = plot_scaling(scaling, out_dir / "scaling.png", metric, title=f"{study_name}: scaling per family")
        figures += [f"![scaling]({fig4.name})", ""]
    lines += ["", "## Trials", "", f"| variant | lr | seed | status | {metric} | reason |", "|---|---|---|---|---|---|"]
    for r in records:
        for t in r.trials:
            lines.append(f"| {r.name} | {fmt(t.lr, '.3g')} | {t.seed} | {t.status} | {fmt(t.ppl, '.6g')} | "
                         f"{t.reason.replace('|', '/')} |")
    lines += ["", "## Figures", ""] + figures
    path = out_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def make_report(tracking_uri: str, study_name: str, out_dir: Path, variant_keys: list[str] | None = None,
                console=None) -> Path:
    """Read the study from MLflow, print the table, write markdown and figures."""
    from cem_ablate.config import ConfigError
    from cem_ablate.tracking.readback import read_study

    try:
        records = read_study(tracking_uri, study_name, variant_keys)
    except LookupError:
        raise ConfigError("STUDY", f"no study {study_name!r} in the MLflow store {tracking_uri}.") from None
    if variant_keys is not None:  # the study file's order
        order = {key: i for i, key in enumerate(variant_keys)}
        records.sort(key=lambda r: order.get(r.key, len(order)))
    else:
        records.sort(key=lambda r: r.start_time)
    if not records:
        raise ConfigError("STUDY", f"study {study_name!r} has no variant runs in {tracking_uri} yet.")
    rows = build_rows(records)
    metric = metric_of(rows)
    print_table(rows, f"study {study_name}", console)
    print_optima(records, metric, console)
    inputs = scaling_inputs(records)
    scaling = summarize_scaling(inputs) if has_size_axis(inputs) else None
    if scaling is not None:
        print_scaling(scaling, metric, console)
    return write_report(records, study_name, out_dir, scaling)


def print_scaling(summary: ScalingSummary, metric: str, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"scaling: {metric}* vs parameters / training FLOPs (power law per family)",
                  title_justify="left")
    for col in ("variant", "vs family", "axis", "multiplier [95%]", "reading"):
        table.add_column(col)
    for cells in equivalence_rows(summary):
        table.add_row(*cells)
    (console or Console()).print(table)
