"""The study report: a table (printed with rich), markdown and paper-style figures.

Everything is read back from MLflow (`tracking.readback`): parent runs carry the
parameter counts and the seed statistics with the fit, the pairing with each baseline
and the seed design (`stats.json`), computed once by `study.summary`: the report never
fits again; child runs carry each trial's status and final metric. The report's
comparisons are decided here, as one family, by the rule the study's MLflow tags and
sequential seeds use (`study.verdicts`, `analysis.decision`): the family is the
report's. The task's metric is named throughout (test perplexity, test RMSE, recall
error). The scaling summary of a study with a size axis is computed here too, from
the logged optima (`analysis.scaling`).

    reports/<study>/report.md
    reports/<study>/ppl_vs_params.png   (Fig. 2 style: objective* vs parameters, the verdicts under it)
    reports/<study>/ppl_vs_lr.png       (Fig. 3a style: objective vs learning rate)
    reports/<study>/scaling.png         (a size axis: power laws per family)
    (each figure also as .svg beside the .png; one colour per variant: `study.plots.variant_colors`)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cem_ablate.analysis.decision import Design
from cem_ablate.analysis.optimum import MIN_LRS_FOR_LR_STAR
from cem_ablate.analysis.scaling import ScalingInput, ScalingSummary, has_size_axis, summarize_scaling
from cem_ablate.analysis.statistics import VariantStatistics
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.figures.plots import SweepSeries, plot_ppl_vs_lr, plot_ppl_vs_params, plot_scaling, variant_colors
from cem_ablate.reporting.seed_report import (
    COMPARISON_COLUMNS,
    COMPARISONS_DEFINITION,
    DEFINITIONS,
    at_text,
    comparison_cells,
    correction_text,
    decision_delta_text,
    equivalence_rows,
    fmt,
    lr_star_text,
    mean_std_text,
    objective_star_text,
    per_lr_lines,
    scaling_lines,
)
from cem_ablate.study.publication import VariantPublication, publications
from cem_ablate.study.verdicts import AT_BASELINE, AT_OPTIMA, Test, decide_family, design_from_record, design_of
from cem_ablate.tracking.readback import VariantRecord

Publications = dict[str, VariantPublication | None]  # variant key -> what its parent published (stats.json)


@dataclass(frozen=True)
class ReportRow:
    name: str
    role: str
    params: int | None
    statistics: VariantStatistics | None  # as logged by the study (stats.json)
    status: str
    tokens: float | None
    is_baseline: bool = False  # some variant is compared against this one

    @property
    def optimum(self):
        return self.statistics.stats.optimum if self.statistics is not None else None


@dataclass(frozen=True)
class ComparisonRow:
    variant: str  # names, as the report shows them
    baseline: str
    test: Test


@dataclass(frozen=True)
class Comparisons:
    """The report's family of comparisons, decided (`study.verdicts.decide_family`)."""

    rows: list[ComparisonRow]
    design: Design
    correction: str
    notes: list[str]  # e.g. comparisons whose pairing was not recorded

    @property
    def count_text(self) -> str:
        n = len(self.rows)
        return f"{n} comparison{'s' if n != 1 else ''}, one family"

    def definition(self, metric: str) -> str:
        # Holm's family is the comparisons that have a test (analysis.decision.adjust): one
        # without seeds on a side counts for nothing and is said apart
        tested = sum(1 for r in self.rows if r.test.decision.p_design is not None)
        return COMPARISONS_DEFINITION.format(
            m=metric,
            design=self.design.describe(),
            alpha=self.design.alpha,
            correction=correction_text(self.correction, tested, self.design.n_tests, len(self.rows) - tested),
        )


def _status_text(record: VariantRecord, statistics: VariantStatistics | None) -> str:
    counts: dict[str, int] = {}
    for trial in record.trials:
        counts[trial.status] = counts.get(trial.status, 0) + 1
    total = len(record.trials)
    parts = [f"{counts.get(TrialStatus.FINISHED, 0)}/{total} finished"]
    others = (TrialStatus.DIVERGED, TrialStatus.FAILED, TrialStatus.PRUNED, TrialStatus.RUNNING)
    parts += [f"{counts[s]} {s}" for s in others if counts.get(s)]
    optimum = statistics.stats.optimum if statistics is not None else None
    if optimum is not None and optimum.edge:  # a one-point grid has no edge
        parts.append(f"lr* at {optimum.edge} edge")
    return ", ".join(parts)


def baseline_keys(records: list[VariantRecord]) -> set[str]:
    return {key for r in records for key in r.baselines.values()} | {r.key for r in records if r.role == "baseline"}


def _statistics(record: VariantRecord, published: Publications) -> VariantStatistics | None:
    publication = published.get(record.key)
    return publication.statistics if publication is not None else None


def _baselines(record: VariantRecord, by_key: dict[str, VariantRecord]) -> list[tuple[str, VariantRecord]]:
    """The record's baselines present in the report, with their names in the study file,
    in the study file's order."""
    return [(name, by_key[k]) for name, k in record.baselines.items() if k in by_key]


def build_rows(records: list[VariantRecord], published: Publications | None = None) -> list[ReportRow]:
    """One row per variant: its optimum and status."""
    published = publications(records) if published is None else published
    baselines = baseline_keys(records)
    rows = []
    for r in records:
        statistics = _statistics(r, published)
        rows.append(
            ReportRow(
                r.name,
                r.role,
                r.params_total,
                statistics,
                _status_text(r, statistics),
                r.metrics.get("tokens_per_trial"),
                r.key in baselines,
            )
        )
    return rows


def build_comparisons(
    records: list[VariantRecord], spec=None, pairings=None, published: Publications | None = None
) -> Comparisons:
    """Every comparison of the report, one family, by the one decision rule.

    How: the study file's `statistics` and seed design where given (`spec`), else as
    the study recorded them (stats.json), else one look at the seeds there are, α =
    0.05, Holm. Paired: as the study recorded it (stats.json), else `pairings` (checked
    on the study file's variants: (variant key, baseline name) -> Pairing), else Welch."""
    published = publications(records) if published is None else published
    by_key = {r.key: r for r in records}
    stats = {r.key: s.stats for r in records if (s := _statistics(r, published)) is not None}
    recorded = next((p.design for p in published.values() if p is not None and p.design is not None), None)
    if spec is not None:
        design, correction = design_of(spec.seeds, spec.statistics), spec.statistics.correction
    elif recorded is not None:
        design, correction = design_from_record(recorded)
    else:
        design, correction = Design.fixed(max((s.n_seeds for s in stats.values()), default=1)), "holm"
    paired, missing = {}, []
    for r in records:
        stored = pub.pairing if (pub := published.get(r.key)) is not None else {}
        for name, _ in _baselines(r, by_key):
            if name in stored:
                paired[(r.key, name)] = stored[name].paired
            elif pairings is not None and (r.key, name) in pairings:
                paired[(r.key, name)] = pairings[(r.key, name)].paired
            else:
                missing.append(f"{r.name} vs {name}")
    notes = (
        [f"pairing not recorded (a study run before pairing was checked): Welch for {', '.join(missing)}"]
        if missing
        else []
    )
    baselines = {r.key: {name: base.key for name, base in _baselines(r, by_key)} for r in records}
    tests = decide_family(stats, baselines, paired, design, correction)
    names = {r.key: r.name for r in records}
    rows = [ComparisonRow(names[t.variant], by_key[baselines[t.variant][t.baseline]].name, t) for t in tests]
    notes += unestimated_lr_notes(rows, {names[k]: v for k, v in stats.items()})
    return Comparisons(rows, design, correction, notes)


def unestimated_lr_notes(rows: list[ComparisonRow], stats_by_name: dict) -> list[str]:
    """One note per comparison whose variant or baseline has no estimated lr* (finished
    trials at fewer than three learning rates): its verdict compares the two at a fixed
    learning rate, not at their tuned optima."""
    notes = []
    for c in rows:
        short = [
            f"{name}: {n} learning rate{'s' * (n != 1)}"
            for name in dict.fromkeys((c.variant, c.baseline))
            if (n := sum(1 for r in stats_by_name[name].by_lr if r.n)) < MIN_LRS_FOR_LR_STAR
        ]
        if short:
            notes.append(
                f"the verdict of {c.variant} vs {c.baseline} rests on no estimated lr* ({'; '.join(short)}; "
                f"an lr* needs at least {MIN_LRS_FOR_LR_STAR}): it compares them at a fixed learning rate, "
                "not at their tuned optima."
            )
    return notes


def figure_notes(comparisons: Comparisons, metric: str) -> list[str]:
    """The verdict written under the objective*-vs-parameters figure, one line per variant
    and baseline: the comparison of the two tuned variants (at the optima where they
    differ, else at the baseline's lr*), as in the report's table, so an unresolved
    difference is not read off the y range."""
    chosen: dict[tuple[str, str], ComparisonRow] = {}
    for c in comparisons.rows:
        if c.test.at == AT_OPTIMA or (c.test.at == AT_BASELINE and (c.variant, c.baseline) not in chosen):
            chosen[(c.variant, c.baseline)] = c
    if not chosen:
        return []
    lines = [f"Δ = variant − baseline ({metric}, seed means at grid points; the table's test and verdict):"]
    for c in chosen.values():
        d = c.test.decision
        holm = f", Holm p {fmt(d.p_holm, '.3g')}" if d.p_holm is not None else ""
        lines.append(f"  {c.variant} − {c.baseline} at {at_text(c.test)}: {decision_delta_text(d)}{holm}: {d.verdict}")
    return lines


def metric_of(rows: list[ReportRow]) -> str:
    """The study's objective, named (every variant of a study has the same task)."""
    return next((r.statistics.objective for r in rows if r.statistics is not None), "test perplexity")


def columns(metric: str) -> tuple[str, ...]:
    return ("variant", "parameters", "seeds", "lr* [95%]", f"{metric} at lr* [95%]", "status")


def row_cells(row: ReportRow) -> list[str]:
    n_seeds = str(row.statistics.stats.n_seeds) if row.statistics is not None else "-"
    name = row.name + (" (baseline)" if row.is_baseline else "")
    return [
        name,
        fmt(row.params, ","),
        n_seeds,
        lr_star_text(row.optimum),
        objective_star_text(row.optimum),
        row.status,
    ]


def print_table(rows: list[ReportRow], comparisons: Comparisons, title: str, console=None) -> None:
    """Three tables on the terminal: optima, comparisons, mean ± std per learning rate."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    metric = metric_of(rows)
    cols = columns(metric)
    table = Table(title=escape(title), title_justify="left")
    for col in cols:
        table.add_column(escape(col), justify="right" if col in ("parameters", "seeds") else "left")
    for row in rows:
        table.add_row(*map(escape, row_cells(row)))
    console.print(table)
    if comparisons.rows:
        table = Table(
            title=escape(f"{title}: Δ vs baseline ({metric}; {comparisons.count_text})"),
            title_justify="left",
            caption=escape(comparisons.definition(metric)),
            caption_justify="left",
        )
        for col in COMPARISON_COLUMNS:
            table.add_column(escape(col))
        for c in comparisons.rows:
            table.add_row(*map(escape, comparison_cells(c.variant, c.baseline, c.test)))
        console.print(table)
    for note in comparisons.notes:
        console.print(escape(f"note: {note}"))
    per_lr = Table(title=f"{metric}: mean ± std over seeds per learning rate", title_justify="left")
    for col in ("variant", "lr", "seeds", "mean ± std"):
        per_lr.add_column(col, justify="left" if col == "variant" else "right")
    for row in rows:
        for lr_row in row.statistics.stats.by_lr if row.statistics is not None else ():
            per_lr.add_row(escape(row.name), f"{lr_row.lr:.3g}", str(lr_row.n), mean_std_text(lr_row))
    console.print(per_lr)


def series_for(records: list[VariantRecord], published: Publications | None = None) -> list[SweepSeries]:
    published = publications(records) if published is None else published
    by_key = {r.key: r for r in records}
    baselines = baseline_keys(records)
    out = []
    for r in records:
        finished = [
            (t.lr, t.value) for t in r.trials if t.status == TrialStatus.FINISHED and t.lr and t.value is not None
        ]
        base = next(iter(_baselines(r, by_key)), None)  # plots and scaling: the first baseline
        statistics = _statistics(r, published)
        out.append(
            SweepSeries(
                name=r.name,
                is_baseline=r.key in baselines,
                finished=finished,
                diverged=[t.lr for t in r.trials if t.status == TrialStatus.DIVERGED and t.lr],
                fit=statistics.stats.optimum.fit if statistics is not None and statistics.stats.optimum else None,
                params=r.params_total,
                tokens=r.metrics.get("tokens_per_trial"),
                group=r.labels.get("model.size", ""),
                family=r.labels.get("variant", r.name),
                baseline_name=base[1].name if base else None,
                stats=statistics.stats if statistics is not None else None,
                metric=statistics.objective if statistics is not None else "test perplexity",
            )
        )
    return out


def scaling_inputs(records: list[VariantRecord], published: Publications | None = None) -> list[ScalingInput]:
    """Families are the study file's variant names (the `variant` label) across sizes."""
    published = publications(records) if published is None else published
    by_key = {r.key: r for r in records}
    out = []
    for r in records:
        statistics = _statistics(r, published)
        tokens, flops = r.metrics.get("tokens_per_trial"), r.metrics.get("train_flops_per_token")
        if statistics is None or statistics.stats.optimum is None or not r.params_total or not tokens or not flops:
            continue
        base = next(iter(_baselines(r, by_key)), None)  # plots and scaling: the first baseline
        family = r.labels.get("variant", r.name)
        out.append(
            ScalingInput(
                r.name,
                family,
                base[1].labels.get("variant", base[1].name) if base else None,
                float(r.params_total),
                float(tokens * flops),
                statistics.stats,
                statistics.stats.optimum.fit.method,
            )
        )
    return out


def write_report(
    records: list[VariantRecord],
    study_name: str,
    out_dir: Path,
    scaling: ScalingSummary | None = None,
    comparisons: Comparisons | None = None,
    lead: str | None = None,
    published: Publications | None = None,
) -> Path:
    """report.md and its figures; `lead`: one line set in bold under the title (the
    other-code note)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    published = publications(records) if published is None else published
    rows = build_rows(records, published)
    comparisons = comparisons if comparisons is not None else build_comparisons(records, published=published)
    metric = metric_of(rows)
    series = series_for(records, published)
    palette = variant_colors(series)  # one colour per variant family in every figure
    fig2 = plot_ppl_vs_params(
        series,
        out_dir / "ppl_vs_params.png",
        title=f"{study_name}: {metric}* vs parameters",
        notes=figure_notes(comparisons, metric),
        palette=palette,
    )
    fig3 = plot_ppl_vs_lr(
        series, out_dir / "ppl_vs_lr.png", title=f"{study_name}: {metric} vs learning rate", palette=palette
    )
    cols = columns(metric)
    lines = [f"# Study `{study_name}`", ""] + ([f"**{lead}**", ""] if lead else [])
    lines += [DEFINITIONS.format(m=metric), "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row_cells(row)) + " |" for row in rows]
    if comparisons.rows:
        lines += [
            "",
            f"## Δ vs baseline ({metric}): {comparisons.count_text}",
            "",
            comparisons.definition(metric),
            "",
            "| " + " | ".join(COMPARISON_COLUMNS) + " |",
            "|" + "---|" * len(COMPARISON_COLUMNS),
        ]
        lines += ["| " + " | ".join(comparison_cells(c.variant, c.baseline, c.test)) + " |" for c in comparisons.rows]
    lines += [line for note in comparisons.notes for line in ("", f"Note: {note}")]
    lines += [
        "",
        f"## {metric}: mean ± std over seeds per learning rate",
        "",
        "| variant | lr | seeds | mean ± std | per seed |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if row.statistics is not None:
            lines += per_lr_lines(row.name, row.statistics)
    figures = [
        f"![{metric} vs parameters]({fig2.name}) ([SVG]({fig2.with_suffix('.svg').name}))",
        "",
        f"![{metric} vs learning rate]({fig3.name}) ([SVG]({fig3.with_suffix('.svg').name}))",
        "",
    ]
    if scaling is not None:
        lines += [""] + scaling_lines(scaling, metric)
        fig4 = plot_scaling(
            scaling, out_dir / "scaling.png", metric, title=f"{study_name}: scaling per family", palette=palette
        )
        figures += [f"![scaling]({fig4.name}) ([SVG]({fig4.with_suffix('.svg').name}))", ""]
    header = f"| variant | lr | seed | status | {metric} | reason | cause |"
    lines += ["", "## Trials", "", header, "|---|---|---|---|---|---|---|"]
    for r in records:
        for t in r.trials:
            lines.append(
                f"| {r.name} | {fmt(t.lr, '.3g')} | {t.seed} | {t.status} | {fmt(t.value, '.6g')} | "
                f"{t.reason.replace('|', '/')} | {t.cause or ''} |"
            )
    lines += ["", "## Figures", ""] + figures
    path = out_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def make_report(
    tracking_uri: str,
    study_name: str,
    out_dir: Path,
    variant_keys: list[str] | None = None,
    console=None,
    expanded=None,
) -> Path:
    """Read the study from MLflow, print the tables, write markdown and figures.

    `expanded` (the study file, validated): its `statistics` and seed design decide, and
    pairs the stored study did not record are checked on its variants (`study.pairing`)."""
    from cem_ablate.config import ConfigError
    from cem_ablate.tracking.readback import read_study
    from cem_ablate.tracking.report_artifacts import log_report
    from cem_ablate.tracking.runs_table_view import share_views

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
    published = publications(records)  # each variant's stats.json, parsed once for the whole report
    rows = build_rows(records, published)
    metric = metric_of(rows)
    comparisons = build_comparisons(
        records,
        expanded.spec if expanded is not None else None,
        _missing_pairings(records, expanded, published),
        published,
    )
    print_table(rows, comparisons, f"study {study_name}", console)
    inputs = scaling_inputs(records, published)
    scaling = summarize_scaling(inputs) if has_size_axis(inputs) else None
    if scaling is not None:
        print_scaling(scaling, metric, console)
    note = other_code_note(records, expanded)
    if note is not None and console is not None:  # one line; in report.md first under the title
        console.print(note, markup=False, highlight=False)
    path = write_report(records, study_name, out_dir, scaling, comparisons, lead=note, published=published)
    # The sections of a transfer study, a forecast, a width study, a study over widths (lr* drift), a GP
    # study with several draws and a study with downstream tasks (each [] for other studies;
    # they need the study file's configs, `expanded`).
    from cem_ablate.reporting.eval_report import eval_section
    from cem_ablate.reporting.forecast_report import forecast_section
    from cem_ablate.reporting.gp_draws_report import gp_draws_section
    from cem_ablate.reporting.lr_drift_report import lr_drift_section
    from cem_ablate.reporting.transfer_report import transfer_section
    from cem_ablate.reporting.width_report import width_section

    extra = (
        transfer_section(records, expanded, tracking_uri, metric, console)
        + forecast_section(records, expanded, metric, console)
        + width_section(records, expanded, tracking_uri, out_dir, metric, console, published)
        + lr_drift_section(records, expanded, metric, console, published)
        + gp_draws_section(records, expanded, metric, console, published)
        + eval_section(records, comparisons, tracking_uri, console)
    )  # a study's `eval:` tasks
    if extra:
        path.write_text(path.read_text() + "\n\n" + "\n".join(extra))
    log_report(tracking_uri, [r.run_id for r in records], out_dir)  # each parent run's page shows it
    share_views(tracking_uri, study_name)  # the runs table's answer columns on any MLflow server
    return path


def other_code_note(records: list[VariantRecord], expanded) -> str | None:
    """One line when finished trials of the study were trained under another trial key than
    this checkout gives them (code fingerprint, data or platform version changed since).
    The report reads what the study published, so it still shows them, but it
    must not present them as this code's: `cem-ablate study` would retrain them."""
    if expanded is None:
        return None
    total, other, names = 0, 0, []
    for r in records:
        try:
            variant = expanded.variant(r.key)
        except KeyError:
            continue
        finished = [
            t
            for t in r.trials
            if t.status == TrialStatus.FINISHED and t.trial_key and t.lr is not None and t.seed is not None
        ]
        changed = sum(variant.trial_key(t.lr, t.seed) != t.trial_key for t in finished)
        total += len(finished)
        if changed:
            other += changed
            names.append(r.name)
    if not other:
        return None
    return (
        f"note: {other} of {total} finished trials ({', '.join(names)}) were trained under another trial key "
        f"than this checkout gives them (code, data or platform version changed since): the numbers below "
        f"are theirs, not this code's; `cem-ablate study` on the study file retrains them."
    )


def _missing_pairings(records: list[VariantRecord], expanded, published: Publications | None = None) -> dict | None:
    """Pairings checked on the study file's variants, only where a record lacks them (a
    store written before pairing was recorded): building models is not free."""
    published = publications(records) if published is None else published
    if expanded is None or all(
        (pub := published.get(r.key)) is not None and pub.pairing_recorded for r in records if r.baselines
    ):
        return None
    from cem_ablate.study.pairing import pair_study

    return pair_study(expanded.variants)


def print_scaling(summary: ScalingSummary, metric: str, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"scaling: {metric}* vs parameters / training FLOPs (power law per family)", title_justify="left"
    )
    for col in ("variant", "vs family", "axis", "multiplier [95%]", "reading"):
        table.add_column(col)
    for cells in equivalence_rows(summary):
        table.add_row(*cells)
    (console or Console()).print(table)
