"""Figures in the paper's style (matplotlib, Agg backend: no display needed).

The y axis is the task's objective, named (`metric`: test perplexity, test RMSE,
recall error). With several seeds (`SweepSeries.stats`, `analysis.statistics`) every
point is a seed mean with ± std error bars, a shaded band spans mean ± std across
learning rates, and the star carries the bootstrap intervals of lr* and objective*.

- `plot_variant_fit`: one variant's learning-rate sweep: points, Akima curve, star at
  the optimum, diverged runs as crosses on the top edge (logged on the parent run).
- `plot_ppl_vs_lr`: Fig. 3a: objective vs learning rate for every variant, Akima
  curves and stars; baselines orange, CEM variants in blues; marker per model size.
- `plot_ppl_vs_params`: Fig. 2: optimal objective vs parameters; baselines are pink
  diamonds, variants dots, each variant linked to its baseline by a line; the token
  budget above each marker; error bars: the objective* interval.
- `plot_scaling`: objective* vs parameters and vs training FLOPs per family with the
  fitted power laws (`analysis.scaling`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from cem_ablate.analysis.akima import AkimaFit
from cem_ablate.analysis.statistics import VariantStats

BASELINE_COLOR = "#e8743b"  # paper: orange baselines in Fig. 3a
BASELINE_DIAMOND = "#e377c2"  # paper: pink diamonds for baselines in Fig. 2
VARIANT_COLORS = ("#1f77b4", "#17becf", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f", "#bcbd22", "#d62728")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")


@dataclass
class SweepSeries:
    """What the figures need of one variant."""

    name: str
    is_baseline: bool
    finished: list[tuple[float, float]]  # (lr, ppl)
    diverged: list[float] = field(default_factory=list)  # lrs
    fit: AkimaFit | None = None
    params: int | None = None
    tokens: float | None = None
    group: str = ""  # e.g. model size: one marker shape per group
    baseline_name: str | None = None  # name of the series this variant is compared with
    stats: VariantStats | None = None  # seed means, spreads and intervals
    metric: str = "test perplexity"  # the task's objective, for axis labels


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _references(series: list[SweepSeries]) -> set[str]:
    """The series drawn in the paper's baseline style: each variant's first baseline
    (Llama), one per group. A second baseline (T = 1 for a T = 2 variant) or a second
    reference within one group (Table 3's T = 1 per kernel) gets a colour of its own,
    or it could not be told apart."""
    first = {s.baseline_name for s in series if s.baseline_name}
    out, groups = set(), set()
    for s in series:
        if s.is_baseline and s.name in first and s.group not in groups:
            out.add(s.name)
            groups.add(s.group)
    return out


def _colors(series: list[SweepSeries]) -> dict[str, str]:
    out, i = {}, 0
    references = _references(series)
    for s in series:
        if s.name in references:
            out[s.name] = BASELINE_COLOR
        else:
            out[s.name] = VARIANT_COLORS[i % len(VARIANT_COLORS)]
            i += 1
    return out


def _markers(series: list[SweepSeries]) -> dict[str, str]:
    groups = list(dict.fromkeys(s.group for s in series))
    return {g: MARKERS[i % len(MARKERS)] for i, g in enumerate(groups)}


def _draw_sweep(ax, s: SweepSeries, color: str, marker: str, label: str | None) -> None:
    if s.fit is not None and len(s.fit.curve_lrs) > 1:
        ax.plot(s.fit.curve_lrs, s.fit.curve_ppls, color=color, lw=1.5, alpha=0.9)
    rows = s.stats.by_lr if s.stats is not None else ()
    if any(r.n > 1 for r in rows):  # seeds: mean ± std, a band, the single seeds faintly
        lrs = [r.lr for r in rows]
        means = [r.mean for r in rows]
        stds = [r.std or 0.0 for r in rows]
        ax.fill_between(lrs, [m - d for m, d in zip(means, stds)], [m + d for m, d in zip(means, stds)],
                        color=color, alpha=0.15, lw=0)
        ax.errorbar(lrs, means, yerr=stds, fmt=marker, color=color, ms=5, capsize=3, zorder=3, label=label)
        if s.finished:
            xs, ys = zip(*s.finished)
            ax.scatter(xs, ys, color=color, marker=".", s=8, alpha=0.4, zorder=2)
    elif s.finished:
        xs, ys = zip(*sorted(s.finished))
        ax.scatter(xs, ys, color=color, marker=marker, s=28, zorder=3, label=label)
    if s.fit is not None:
        ax.scatter([s.fit.lr_star], [s.fit.ppl_star], marker="*", s=220, color=color,
                   edgecolor="black", linewidth=0.7, zorder=4)
        optimum = s.stats.optimum if s.stats is not None else None
        if optimum is not None and optimum.lr_interval is not None:  # the star's 95% bootstrap intervals
            lo, hi = optimum.lr_interval, optimum.objective_interval
            ax.errorbar([s.fit.lr_star], [s.fit.ppl_star],
                        xerr=[[max(s.fit.lr_star - lo.low, 0.0)], [max(lo.high - s.fit.lr_star, 0.0)]],
                        yerr=[[max(s.fit.ppl_star - hi.low, 0.0)], [max(hi.high - s.fit.ppl_star, 0.0)]],
                        fmt="none", ecolor="black", elinewidth=0.8, capsize=2, zorder=4)
    if s.diverged:  # on the upper edge: their objective is not finite
        ax.scatter(s.diverged, [1.0] * len(s.diverged), marker="x", color=color, s=40, zorder=3,
                   transform=ax.get_xaxis_transform(), clip_on=False)


def _finish_lr_axes(ax, title: str, lrs: list[float] = (), metric: str = "test perplexity") -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    if lrs:  # ticks at the sampled learning rates, written as numbers, not powers of 2
        ax.xaxis.set_major_locator(FixedLocator(sorted(set(lrs))))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("learning rate")
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def plot_variant_fit(s: SweepSeries, path: str | Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6), dpi=120)
    color = BASELINE_COLOR if s.is_baseline else VARIANT_COLORS[0]
    _draw_sweep(ax, s, color, "o", None)
    title = s.name
    if s.fit is not None:
        title += f"\nlr* = {s.fit.lr_star:.3g}, {s.metric}* = {s.fit.ppl_star:.4g}"
        if s.fit.at_edge and s.fit.n_points > 1:  # a one-point grid has no edge
            title += f" (at the {s.fit.edge} edge of the grid)"
    _finish_lr_axes(ax, title, [lr for lr, _ in s.finished] + s.diverged, s.metric)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_ppl_vs_lr(series: list[SweepSeries], path: str | Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.8), dpi=120)
    colors, markers = _colors(series), _markers(series)
    for s in series:
        label = s.name + (f" [{s.group}]" if s.group and len(markers) > 1 else "")
        _draw_sweep(ax, s, colors[s.name], markers[s.group], label)
    metric = series[0].metric if series else "test perplexity"
    _finish_lr_axes(ax, title or f"{metric} vs learning rate (stars: Akima optima)",
                    [lr for s in series for lr, _ in s.finished] + [lr for s in series for lr in s.diverged], metric)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def _tokens_text(tokens: float | None) -> str:
    if tokens is None or not math.isfinite(tokens):
        return ""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= scale:
            return f"{tokens / scale:.3g}{unit}"
    return f"{tokens:.0f}"


def plot_ppl_vs_params(series: list[SweepSeries], path: str | Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.8), dpi=120)
    colors, references = _colors(series), _references(series)
    by_name = {s.name: s for s in series}
    plotted = [s for s in series if s.fit is not None and s.params]
    for s in plotted:  # links first, under the markers
        base = by_name.get(s.baseline_name or "")
        if base is not None and base.fit is not None and base.params:
            ax.plot([s.params, base.params], [s.fit.ppl_star, base.fit.ppl_star], color="gray", lw=1, ls="--",
                    zorder=1)
    seen_labels = set()
    for s in plotted:
        if s.name in references:
            style = dict(marker="D", color=BASELINE_DIAMOND, s=60)
        else:
            style = dict(marker="o", color=colors[s.name], s=50)
        label = s.name if s.name not in seen_labels else None
        seen_labels.add(s.name)
        ax.scatter([s.params], [s.fit.ppl_star], zorder=3, edgecolor="black", linewidth=0.5, label=label, **style)
        optimum = s.stats.optimum if s.stats is not None else None
        if optimum is not None and optimum.objective_interval is not None:
            iv = optimum.objective_interval
            ax.errorbar([s.params], [s.fit.ppl_star], yerr=[[max(s.fit.ppl_star - iv.low, 0.0)],
                                                             [max(iv.high - s.fit.ppl_star, 0.0)]],
                        fmt="none", ecolor=style["color"], capsize=3, zorder=2)
        text = _tokens_text(s.tokens)
        if text:
            ax.annotate(text, (s.params, s.fit.ppl_star), textcoords="offset points", xytext=(0, 7),
                        ha="center", fontsize=7)
    from matplotlib.ticker import EngFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(EngFormatter(places=0))
    ax.xaxis.set_minor_formatter(EngFormatter(places=0))
    metric = series[0].metric if series else "test perplexity"
    ax.set_xlabel("parameters")
    ax.set_ylabel(f"{metric} at lr* (Akima)")
    ax.set_title(title or f"{metric} vs parameters (variants linked to their baselines)")
    ax.grid(True, which="both", alpha=0.3)
    if plotted:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_scaling(summary, path: str | Path, metric: str = "test perplexity", title: str = "") -> Path:
    """Objective* vs parameters and vs training FLOPs per family, with the power laws."""
    import numpy as np

    from cem_ablate.analysis.scaling import FLOPS, PARAMS, SATURATING

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), dpi=120)
    families = list(summary.points)
    baseline_families = {m.baseline_family for ms in summary.points.values() for m in ms if m.baseline_family}
    colors, i = {}, 0
    for f in families:
        if f in baseline_families:
            colors[f] = BASELINE_COLOR
        else:
            colors[f] = VARIANT_COLORS[i % len(VARIANT_COLORS)]
            i += 1
    for ax, axis in zip(axes, (PARAMS, FLOPS)):
        for family in families:
            members = [m for m in summary.points[family] if m.stats.optimum is not None]
            if not members:
                continue
            xs = [m.params if axis == PARAMS else m.train_flops for m in members]
            ys = [m.stats.optimum.objective_star for m in members]
            low = [y - (m.stats.optimum.objective_interval.low if m.stats.optimum.objective_interval else y)
                   for m, y in zip(members, ys)]
            high = [(m.stats.optimum.objective_interval.high if m.stats.optimum.objective_interval else y) - y
                    for m, y in zip(members, ys)]
            law = summary.laws.get((family, axis))
            form = "a·x^-b + c" if law is not None and law.form == SATURATING else "log-log line"
            label = family + (f" ({form}, b = {law.b:.2f})" if law else "")
            ax.errorbar(xs, ys, yerr=[low, high], fmt="D" if family in baseline_families else "o",
                        color=colors[family], capsize=3, label=label, zorder=3)
            if law is not None:
                grid = np.geomspace(min(xs), max(xs), 100)
                ax.plot(grid, [law(x) for x in grid], color=colors[family], lw=1.2, alpha=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(axis)
        ax.set_ylabel(f"{metric} at lr*")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(title or f"{metric}: scaling per family (power-law fits)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
