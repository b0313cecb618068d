"""The report's width section: does a penalty shrink with width?

A study gets this section when its variants vary the width alone -- at least three
d_model values, one n_layers -- and some variant has a `T1` baseline (studies/width.yaml).
Its variants are sorted here by their validated configs (never by names):

- arm: Llama attention ("llama"), CEM attention T = 1 ("T1") or T = 2 ("T2");
- budget: "<N> steps" for `max_steps` runs; "<R> tokens/parameter" for token-budget
  runs (R = tokens / Llama-baseline parameters), which also takes, at widths it lacks,
  the `max_steps` runs with the same R within 2% (d 128's 600 steps in width.yaml).

Per budget, two comparisons (`analysis.width_scaling`): T2 vs T1 (at T1's lr* grid
point, paired as the study recorded the pair) and T1 vs Llama (at Llama's lr* grid
point, Welch); each Δ is the mean log-ratio of the objective, fitted against
log2(d/64). The slope tests of the section are one family (Holm at the study's α):
"shrinks"/"grows" iff the Holm p <= α (then b's 95% interval also excludes 0). Per
width, the fraction of second recursion steps that lowered the energy (T2 trials at
that grid point, every CEM sublayer, final validation; `tracking.readback.read_run_metrics`).

    reports/<study>/width.png   per-width Δ with 95% intervals and the fitted line
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cem_ablate.analysis.decision import ALPHA, holm
from cem_ablate.analysis.statistics import VariantStats
from cem_ablate.analysis.width_scaling import WidthDelta, WidthInput, WidthTrend, energy_descent, fit_trend, width_delta
from cem_ablate.config.trial_status import TrialStatus

T2_VS_T1, T1_VS_LLAMA = "CEM attention T=2 vs T=1", "CEM attention T=1 vs Llama"
SAME_RATIO = 0.02  # a max_steps run belongs to a tokens/parameter budget within 2%


@dataclass(frozen=True)
class WidthDesign:
    """budget -> width -> arm ("T1", "T2", "llama") -> variant key."""

    budgets: dict[str, dict[int, dict[str, str]]]


def _arm(config) -> str | None:
    attention = config.model.attention
    if attention.name == "llama":
        return "llama"
    if attention.name == "cem" and attention.steps in (1, 2) and attention.depth_mode == "recursion":
        return f"T{attention.steps}"
    return None


def width_design(expanded) -> WidthDesign | None:
    """The study's variants by budget, width and arm; None when width is not the one axis."""
    from cem_ablate.model.config import llama_baseline_params
    from cem_ablate.training.budget import resolve_budget

    if expanded is None or not any("T1" in v.baselines for v in expanded.variants):
        return None
    dims = [v.config.model.dims for v in expanded.variants]
    if len({d.d_model for d in dims}) < 3 or len({d.n_layers for d in dims}) != 1:
        return None
    budgets: dict[str, dict[int, dict[str, str]]] = {}
    step_runs = []
    for v, d in zip(expanded.variants, dims):
        arm = _arm(v.config)
        if arm is None:
            continue
        budget = resolve_budget(v.config)
        # the requested budget: rounding up to whole steps differs by width
        tokens = budget.requested_tokens if budget.requested_tokens is not None else budget.tokens
        ratio = tokens / llama_baseline_params(v.config.training_model())
        if budget.rule == "max_steps":
            name = f"{budget.steps} steps"
            step_runs.append((ratio, d.d_model, arm, v.key))
        else:
            name = f"{ratio:.3g} tokens/parameter"
        budgets.setdefault(name, {}).setdefault(d.d_model, {})[arm] = v.key
    for name, widths in budgets.items():
        if not name.endswith("tokens/parameter"):
            continue
        target = float(name.split()[0])
        for ratio, width, arm, key in step_runs:
            if abs(ratio / target - 1.0) <= SAME_RATIO and arm not in widths.get(width, {}):
                widths.setdefault(width, {})[arm] = key
    return WidthDesign({k: dict(sorted(w.items())) for k, w in budgets.items()})


@dataclass(frozen=True)
class ComparisonTrend:
    budget: str
    comparison: str  # T2_VS_T1 or T1_VS_LLAMA
    deltas: list[WidthDelta]
    lrs: dict[int, float]  # width -> the grid lr compared at
    trend: WidthTrend | None
    p_holm: float | None = None
    verdict: str = "unresolved"


@dataclass
class WidthSection:
    trends: list[ComparisonTrend]
    energy: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)  # budget -> width -> (lowered, total)
    alpha: float = ALPHA


def _inputs(
    design_widths: Mapping[int, Mapping[str, str]],
    stats: Mapping[str, VariantStats],
    paired: Mapping[str, bool],
    variant_arm: str,
    baseline_arm: str,
) -> tuple[list[WidthInput], dict]:
    items, lrs = [], {}
    for width, arms in design_widths.items():
        v, b = stats.get(arms.get(variant_arm, "")), stats.get(arms.get(baseline_arm, ""))
        if v is None or b is None or b.best_grid_lr is None:
            continue
        lr = b.best_grid_lr
        row_v, row_b = v.at(lr), b.at(lr)
        if row_v is None or row_b is None:
            continue
        items.append(WidthInput(width, row_v.by_seed(), row_b.by_seed(), paired=paired.get(arms[variant_arm], False)))
        lrs[width] = lr
    return items, lrs


def analyze(
    design: WidthDesign,
    stats: Mapping[str, VariantStats],
    t2_paired: Mapping[str, bool],
    alpha: float = ALPHA,
    energy: Mapping[str, list[Mapping[str, float]]] | None = None,
) -> WidthSection:
    """Pure: `stats` variant key -> its statistics; `t2_paired` T2 variant key -> whether
    its T1 pair is paired; `energy` T2 variant key -> energy traces of its trials."""
    trends = []
    for budget, widths in design.budgets.items():
        for comparison, (va, ba), pairing in ((T2_VS_T1, ("T2", "T1"), t2_paired), (T1_VS_LLAMA, ("T1", "llama"), {})):
            items, lrs = _inputs(widths, stats, pairing, va, ba)
            deltas = [width_delta(i, alpha) for i in items]
            trends.append(ComparisonTrend(budget, comparison, deltas, lrs, fit_trend(deltas, alpha)))
    tested = [i for i, t in enumerate(trends) if t.trend is not None]
    adjusted = dict(zip(tested, holm([tr.p for t in trends if (tr := t.trend) is not None]))) if tested else {}
    out = []
    for i, t in enumerate(trends):
        p = adjusted.get(i)
        verdict = "unresolved"
        if p is not None and t.trend is not None and p <= alpha and t.trend.b != 0:  # p: a tested trend
            verdict = "shrinks" if t.trend.b < 0 else "grows"
        out.append(ComparisonTrend(t.budget, t.comparison, t.deltas, t.lrs, t.trend, p, verdict))
    section = WidthSection(out, {}, alpha)
    for budget, widths in design.budgets.items():
        for width, arms in widths.items():
            traces = (energy or {}).get(arms.get("T2", ""), [])
            if traces:
                section.energy.setdefault(budget, {})[width] = energy_descent(traces)
    return section


def _pct(log_ratio: float | None) -> str:
    return "-" if log_ratio is None else f"{100.0 * math.expm1(log_ratio):+.1f}%"


def _width_text(x: float | None) -> str:
    if x is None:
        return "-"
    return "∞" if math.isinf(x) else f"{x:.0f}"


def trend_text(t: ComparisonTrend) -> str:
    if t.trend is None:
        return f"{t.budget}, {t.comparison}: fewer than 3 widths with results, no fit"
    f = t.trend
    c = f.crossing
    crossing = (
        f"zero crossing d0 ≈ {_width_text(c.width)} [{_width_text(c.low)}, {_width_text(c.high)}] "
        "(extrapolation, Fieller)"
        if c.low is not None
        else "zero crossing: none (b's interval contains 0)"
    )
    return (
        f"{t.budget}, {t.comparison}: Δ(d) = a + b·log2(d/64) on {len(f.widths)} widths "
        f"{list(f.widths)}: a = {f.a:+.6f} ({_pct(f.a)} at d 64), b = {f.b:+.6f} "
        f"[{f.b_low:+.6f}, {f.b_high:+.6f}] per doubling ({f.level:.0%}, t on {f.df} df), p = {f.p:.3g}, "
        f"Holm p = {t.p_holm:.3g}: {t.verdict}; {crossing}"
    )


def section_lines(section: WidthSection, metric: str) -> list[str]:
    """Markdown of the section."""
    lines = [
        "## Width: does the penalty shrink with width?",
        "",
        f"Δ = mean over seeds of ln({metric} variant / {metric} baseline) per width, 95% interval "
        "(paired t for T=2 vs T=1 as the study recorded the pair, Welch for T=1 vs Llama); the line is "
        "OLS over the per-width Δ; the slope tests are one family, Holm at "
        f"α = {section.alpha:g}; a verdict needs the Holm p <= α.",
        "",
    ]
    for t in section.trends:
        lines += [f"- {trend_text(t)}"]
    lines += [
        "",
        "| budget | comparison | width | lr | n | Δ log-ratio [95%] | Δ % | p | second steps lowering E |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in section.trends:
        for d in t.deltas:
            dec = d.decision
            interval = (
                f"{dec.delta:+.4f} [{dec.low:+.4f}, {dec.high:+.4f}]"
                if dec.low is not None
                else f"{dec.delta:+.4f} (n too small)"
                if dec.delta is not None
                else "-"
            )
            n = dec.n_pairs if dec.test == "paired t" else min(dec.n_variant, dec.n_baseline)
            energy = "-"
            if t.comparison == T2_VS_T1 and d.width in section.energy.get(t.budget, {}):
                low, tot = section.energy[t.budget][d.width]
                energy = f"{low}/{tot}" + (f" ({low / tot:.0%})" if tot else "")
            p = f"{dec.p:.3g}" if dec.p is not None else "-"
            lines.append(
                f"| {t.budget} | {t.comparison} | {d.width} | {t.lrs.get(d.width, math.nan):.3g} | {n} | "
                f"{interval} | {_pct(dec.delta)} | {p} | {energy} |"
            )
    return lines


def plot_section(section: WidthSection, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    comparisons = (T2_VS_T1, T1_VS_LLAMA)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), squeeze=False)
    for ax, comparison in zip(axes[0], comparisons):
        for i, t in enumerate(tt for tt in section.trends if tt.comparison == comparison):
            shift = 1.0 + 0.03 * i  # budgets side by side
            ws = [d.width * shift for d in t.deltas if d.decision.delta is not None]
            ys = [d.decision.delta for d in t.deltas if d.decision.delta is not None]
            lo = [
                d.decision.delta - d.decision.low if d.decision.low is not None else 0.0
                for d in t.deltas
                if d.decision.delta is not None
            ]
            hi = [
                d.decision.high - d.decision.delta if d.decision.high is not None else 0.0
                for d in t.deltas
                if d.decision.delta is not None
            ]
            bar = ax.errorbar(ws, ys, yerr=[lo, hi], fmt="o", capsize=3, label=f"{t.budget}: Δ, 95% interval")
            if t.trend is not None:
                grid = np.geomspace(min(t.trend.widths), max(t.trend.widths), 50)
                ax.plot(
                    grid,
                    t.trend.a + t.trend.b * np.log2(grid / 64),
                    color=bar[0].get_color(),
                    label=f"fit: b = {t.trend.b:+.3f} [{t.trend.b_low:+.3f}, {t.trend.b_high:+.3f}]",
                )
        ax.axhline(0.0, color="grey", lw=0.8, label="Δ = 0: no difference")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d_model")
        ax.set_ylabel("Δ = ln(objective ratio)")
        ax.set_title(comparison)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    from cem_ablate.figures.plots import save

    return save(fig, path)  # PNG and SVG beside it


def width_section(
    records, expanded, tracking_uri: str, out_dir: Path, metric: str, console=None, published=None
) -> list[str]:
    """Read what the section needs (statistics, pairing, energy traces), print it, draw it;
    the markdown lines for report.md ([] when the study is not a width study)."""
    design = width_design(expanded)
    if design is None:
        return []
    from cem_ablate.study.publication import publications
    from cem_ablate.tracking.readback import read_run_metrics

    published = publications(records) if published is None else published  # parsed once (study.publication)
    by_key = {r.key: r for r in records}
    stats = {k: published[k].statistics.stats for k in by_key if published.get(k) is not None}
    t2_paired: dict[str, bool] = {}
    energy: dict[str, list[Mapping[str, float]]] = {}
    for widths in design.budgets.values():
        for arms in widths.values():
            record = by_key.get(arms.get("T2", ""))
            if record is None:
                continue
            pairing = published[record.key].pairing.get("T1") if published.get(record.key) is not None else None
            t2_paired[record.key] = bool(pairing and pairing.paired)
            base = stats.get(arms.get("T1", ""))
            lr = base.best_grid_lr if base is not None else None
            run_ids = [t.run_id for t in record.trials if t.status == TrialStatus.FINISHED and t.lr == lr]
            energy[record.key] = list(read_run_metrics(tracking_uri, run_ids, "energy/").values())
    section = analyze(design, stats, t2_paired, expanded.spec.statistics.alpha, energy)
    lines = section_lines(section, metric)
    if console is not None:
        for line in lines:
            console.print(line, markup=False, highlight=False)
    figure = plot_section(section, out_dir / "width.png", f"{expanded.spec.name}: Δ vs width")
    return lines + ["", f"![width]({figure.name})", ""]
