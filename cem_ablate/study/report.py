"""The study report: a table (printed with rich), markdown and paper-style figures.

Everything is read back from MLflow (`tracking.readback`): parent runs carry lr*,
ppl*, the edge flag, parameter counts and the fit itself (`fit.json`, computed once by
`study.summary`: the report never fits again); child runs carry each trial's status
and final metric.

    reports/<study>/report.md
    reports/<study>/ppl_vs_params.png   (Fig. 2 style)
    reports/<study>/ppl_vs_lr.png       (Fig. 3a style)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.study.akima import AkimaFit
from cem_ablate.study.plots import SweepSeries, plot_ppl_vs_lr, plot_ppl_vs_params
from cem_ablate.tracking.readback import VariantRecord


@dataclass(frozen=True)
class ReportRow:
    name: str
    role: str
    params: int | None
    lr_star: float | None
    ppl_star: float | None
    edge: str | None
    baseline: str | None  # name of the baseline variant
    delta: float | None  # ppl* - baseline ppl*
    status: str
    tokens: float | None
    is_baseline: bool = False  # some variant is compared against this one

    @property
    def delta_pct(self) -> float | None:
        if self.delta is None or self.ppl_star is None or self.ppl_star == self.delta:
            return None
        return 100.0 * self.delta / (self.ppl_star - self.delta)


def _status_text(record: VariantRecord) -> str:
    counts: dict[str, int] = {}
    for trial in record.trials:
        counts[trial.status] = counts.get(trial.status, 0) + 1
    total = len(record.trials)
    parts = [f"{counts.get('finished', 0)}/{total} finished"]
    parts += [f"{counts[s]} {s}" for s in ("diverged", "failed", "pruned", "running") if counts.get(s)]
    if record.edge:
        parts.append(f"lr* at {record.edge} edge")
    return ", ".join(parts)


def baseline_keys(records: list[VariantRecord]) -> set[str]:
    return {key for r in records for key in r.baselines.values()} | {r.key for r in records if r.role == "baseline"}


def build_rows(records: list[VariantRecord]) -> list[ReportRow]:
    by_key = {r.key: r for r in records}
    baselines = baseline_keys(records)
    rows = []
    for r in records:
        baseline = next((by_key[k] for k in r.baselines.values() if k in by_key), None)
        delta = None
        if baseline is not None and r.ppl_star is not None and baseline.ppl_star is not None:
            delta = r.ppl_star - baseline.ppl_star
        rows.append(ReportRow(r.name, r.role, r.params_total, r.lr_star, r.ppl_star, r.edge,
                              baseline.name if baseline else None, delta, _status_text(r),
                              r.metrics.get("tokens_per_trial"), r.key in baselines))
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, spec)


def _delta_text(row: ReportRow) -> str:
    if row.delta is None:
        return "(baseline)" if row.is_baseline else "-"
    pct = row.delta_pct
    return f"{row.delta:+.3f}" + (f" ({pct:+.1f}%)" if pct is not None else "") + f" vs {row.baseline}"


COLUMNS = ("variant", "parameters", "lr*", "ppl*", "Δ vs baseline", "status")


def row_cells(row: ReportRow) -> list[str]:
    lr = _fmt(row.lr_star, ".3g") + (" (edge)" if row.edge else "")
    return [row.name, _fmt(row.params, ","), lr, _fmt(row.ppl_star, ".4g"), _delta_text(row), row.status]


def print_table(rows: list[ReportRow], title: str, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in ("parameters", "lr*", "ppl*") else "left")
    for row in rows:
        table.add_row(*row_cells(row))
    (console or Console()).print(table)


def series_for(records: list[VariantRecord]) -> list[SweepSeries]:
    by_key = {r.key: r for r in records}
    baselines = baseline_keys(records)
    out = []
    for r in records:
        finished = [(t.lr, t.ppl) for t in r.trials if t.status == "finished" and t.lr and t.ppl is not None]
        baseline = next((by_key[k] for k in r.baselines.values() if k in by_key), None)
        out.append(SweepSeries(
            name=r.name, is_baseline=r.key in baselines,
            finished=finished, diverged=[t.lr for t in r.trials if t.status == "diverged" and t.lr],
            fit=AkimaFit.from_dict(r.fit) if r.fit else None, params=r.params_total,
            tokens=r.metrics.get("tokens_per_trial"), group=r.labels.get("model.size", ""),
            baseline_name=baseline.name if baseline else None))
    return out


def write_report(records: list[VariantRecord], study_name: str, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = build_rows(records)
    series = series_for(records)
    fig2 = plot_ppl_vs_params(series, out_dir / "ppl_vs_params.png", title=f"{study_name}: perplexity vs parameters")
    fig3 = plot_ppl_vs_lr(series, out_dir / "ppl_vs_lr.png", title=f"{study_name}: perplexity vs learning rate")
    lines = [f"# Study `{study_name}`", "",
             "lr* and ppl*: minimum of the Akima interpolation of final test perplexity over "
             "log2(lr) (SPEC §8); \"edge\" marks an optimum at the end of the sampled range.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row_cells(row)) + " |" for row in rows]
    lines += ["", "## Trials", "", "| variant | lr | seed | status | final metric | reason |", "|---|---|---|---|---|---|"]
    for r in records:
        for t in r.trials:
            lines.append(f"| {r.name} | {_fmt(t.lr, '.3g')} | {t.seed} | {t.status} | {_fmt(t.ppl, '.4g')} | "
                         f"{t.reason.replace('|', '/')} |")
    lines += ["", "## Figures", "", f"![perplexity vs parameters]({fig2.name})", "",
              f"![perplexity vs learning rate]({fig3.name})", ""]
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
    print_table(build_rows(records), f"study {study_name}", console)
    return write_report(records, study_name, out_dir)
