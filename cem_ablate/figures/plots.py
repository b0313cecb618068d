"""Figures in the paper's style (matplotlib, Agg backend: no display needed).

The y axis is the task's objective, named (`metric`: test perplexity, test RMSE,
recall error). With several seeds (`SweepSeries.stats`, `analysis.statistics`) every
point is a seed mean with ± std error bars, a shaded band spans mean ± std across
learning rates, and the star carries the bootstrap intervals of lr* and objective*.

- `plot_variant_fit`: one variant's learning-rate sweep: points, Akima curve, star at
  the optimum, diverged runs as crosses on the top edge (logged on the parent run).
- `plot_ppl_vs_lr`: Fig. 3a: objective vs learning rate for every variant, Akima
  curves and stars; marker per model size.
- `plot_ppl_vs_params`: Fig. 2: optimal objective vs parameters; baselines are
  diamonds, variants dots, each variant linked to its baseline by a dashed line;
  error bars: the objective* interval; under the axes, the report's Δ and verdict per
  comparison (`notes`), so an unresolved difference is not read off the y range.
- `plot_scaling`: objective* vs parameters and vs training FLOPs per family with the
  fitted power laws (`analysis.scaling`).

What a reviewer needs of every figure: one colour per variant family in
every figure (`variant_colors`, the one owner of that map; baselines orange as in the
paper's Fig. 3a), a legend for every mark (variants in one legend, the marks - star,
band, bars, crosses, links, fitted lines - in a second, both outside the axes), tick
labels that never overlap (`declutter_ticks`), and an SVG beside every PNG (`save`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cem_ablate.analysis.akima import AkimaFit
from cem_ablate.analysis.statistics import LEVEL, VariantStats

if TYPE_CHECKING:  # matplotlib loads on first use (`_pyplot`)
    from matplotlib.transforms import Bbox

BASELINE_COLOR = "#e8743b"  # paper: orange baselines in Fig. 3a (and here in every figure)
VARIANT_COLORS = ("#1f77b4", "#17becf", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f", "#bcbd22", "#d62728")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")
MARK_COLOR = "#444444"  # the marks' legend: black-ish, not any variant's colour
MAX_LISTED_TICKS = 8  # at most this many sampled learning rates are written as ticks


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
    family: str = ""  # the study file's variant name across sizes (one colour); "" = name

    @property
    def family_name(self) -> str:
        return self.family or self.name


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --- colours: one owner --------------------------------------------------------------------


def _references(series: list[SweepSeries]) -> set[str]:
    """The families drawn in the paper's baseline colour: each variant's first baseline
    (Llama), one per group. A second baseline (T = 1 for a T = 2 variant) or a second
    reference within one group (Table 3's T = 1 per kernel) gets a colour of its own,
    or it could not be told apart."""
    first = {s.baseline_name for s in series if s.baseline_name}
    out, groups = set(), set()
    for s in series:
        if s.is_baseline and s.name in first and s.group not in groups:
            out.add(s.family_name)
            groups.add(s.group)
    return out


def variant_colors(series: list[SweepSeries]) -> dict[str, str]:
    """Family -> colour, for every figure of a study: compute it once from the study's
    series (in the study file's order) and pass it to each figure, so a variant has one
    colour everywhere (its sizes share it; markers tell sizes apart)."""
    out, i = {}, 0
    references = _references(series)
    for s in series:
        family = s.family_name
        if family in out:
            continue
        if family in references:
            out[family] = BASELINE_COLOR
        else:
            out[family] = VARIANT_COLORS[i % len(VARIANT_COLORS)]
            i += 1
    return out


def study_colors(variants) -> dict[str, str]:
    """`variant_colors` of a study's `Variant`s (study file order), as the report computes
    it from what MLflow holds: the per-variant figure logged during the study wears the
    colour the report's figures give that variant."""
    names = {v.key: v.name for v in variants}
    as_baseline = {key for v in variants for key in v.baselines.values()}
    return variant_colors(
        [
            SweepSeries(
                v.name,
                v.key in as_baseline or v.role == "baseline",
                [],
                group=str(v.axis_values.get("model.size", "")),
                baseline_name=next((names[k] for k in v.baselines.values() if k in names), None),
                family=str(v.axis_values.get("variant", v.name)),
            )
            for v in variants
        ]
    )


def _colors(series: list[SweepSeries], palette: dict[str, str] | None = None) -> dict[str, str]:
    """Series name -> colour (its family's)."""
    palette = palette or variant_colors(series)
    return {s.name: palette.get(s.family_name, VARIANT_COLORS[0]) for s in series}


def _markers(series: list[SweepSeries]) -> dict[str, str]:
    groups = list(dict.fromkeys(s.group for s in series))
    return {g: MARKERS[i % len(MARKERS)] for i, g in enumerate(groups)}


# --- saving, ticks, legends ----------------------------------------------------------------


def _visible_labels(axis, renderer):
    return [
        t
        for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True)
        if t.get_visible() and t.get_text() and _in_view(axis, t)
    ]


def _in_view(axis, label) -> bool:
    low, high = sorted(axis.get_view_interval())
    x = label.get_position()[0 if axis.axis_name == "x" else 1]
    return low <= x <= high


def declutter_ticks(fig) -> None:
    """Hide tick labels that would overlap a label kept before them (left to right,
    bottom to top): labels are readable at any range (no "90 k100 k")."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = _visible_labels(axis, renderer)
            labels.sort(key=lambda t: t.get_position()[0 if axis.axis_name == "x" else 1])
            kept: list[Bbox] = []
            for label in labels:
                box = label.get_window_extent(renderer).expanded(1.1, 1.0)
                if any(box.overlaps(k) for k in kept):
                    label.set_visible(False)
                else:
                    kept.append(box)


def save(fig, path: str | Path) -> Path:
    """PNG at `path` and an SVG beside it (same name); legends outside the axes are kept."""
    plt = _pyplot()
    declutter_ticks(fig)
    path = Path(path)
    for target in (path, path.with_suffix(".svg")):
        fig.savefig(target, bbox_inches="tight", dpi=120)
    plt.close(fig)
    return path


def _mark_handles(ax, marks: list[str], level: float = LEVEL) -> list:
    """Proxy artists in a neutral colour for the legend of marks (what each symbol is)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    def bars(label, marker="none", x=False):
        kw = dict(xerr=[1.0]) if x else {}
        proxy = ax.errorbar(
            [math.nan],
            [math.nan],
            yerr=[1.0],
            fmt=marker,
            color=MARK_COLOR,
            ecolor=MARK_COLOR,
            capsize=3,
            ms=5,
            label=label,
            **kw,
        )
        return proxy

    every = {
        "points": lambda: Line2D([], [], ls="", marker="o", color=MARK_COLOR, ms=5, label="one trial (seed)"),
        "curve": lambda: Line2D([], [], color=MARK_COLOR, lw=1.5, label="Akima interpolation over log2(lr)"),
        "mean": lambda: bars("seed mean ± std", "o"),
        "band": lambda: Patch(facecolor=MARK_COLOR, alpha=0.2, label="band: seed mean ± std"),
        "seeds": lambda: Line2D([], [], ls="", marker=".", color=MARK_COLOR, alpha=0.5, label="single seeds"),
        "star": lambda: Line2D(
            [], [], ls="", marker="*", ms=13, mfc="white", mec="black", label="lr*, objective*: Akima optimum"
        ),
        "star_interval": lambda: bars(f"{level:.0%} intervals of lr*, objective*", x=True),
        "diverged": lambda: Line2D(
            [], [], ls="", marker="x", color=MARK_COLOR, label="diverged (not finite; on the top edge)"
        ),
        "baseline": lambda: Line2D(
            [], [], ls="", marker="D", color=MARK_COLOR, mec="black", ms=6, label="baseline (diamond)"
        ),
        "variant": lambda: Line2D(
            [], [], ls="", marker="o", color=MARK_COLOR, mec="black", ms=6, label="variant (dot)"
        ),
        "link": lambda: Line2D([], [], color="gray", lw=1, ls="--", label="dashed: variant to its baseline"),
        "objective_interval": lambda: bars(f"{level:.0%} interval of objective*"),
        "law": lambda: Line2D([], [], color=MARK_COLOR, lw=1.2, label="fitted power law"),
    }
    return [every[m]() for m in marks]


def _legends(ax, variant_handles: list, marks: list[str], variants_title: str = "variant") -> None:
    """Two legends right of the axes: the variants (colour) above, the marks below."""
    if variant_handles:
        first = ax.legend(
            handles=variant_handles,
            title=variants_title,
            fontsize=8,
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0.0,
        )
        ax.add_artist(first)
    if marks:
        ax.legend(
            handles=_mark_handles(ax, marks),
            title="marks",
            fontsize=7,
            title_fontsize=8,
            loc="lower left",
            bbox_to_anchor=(1.02, 0.0),
            borderaxespad=0.0,
        )


def _variant_handle(color: str, marker: str, label: str, line: bool = True):
    from matplotlib.lines import Line2D

    return Line2D([], [], color=color, marker=marker, ls="-" if line else "", ms=6, label=label)


def _log_ticks(axis, values: list[float], unit_formatter: bool = True) -> None:
    """A log axis labelled at 1, 2, 5 x 10^k over up to two decades (a plain log axis
    labels only the decades: one label, or none, over a narrow range), at the decades
    beyond; engineering notation (2M, 10M)."""
    from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter

    values = [v for v in values if v > 0 and math.isfinite(v)]
    decades = math.log10(max(values) / min(values)) if values else 3.0
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 2 else (1.0,)))
    axis.set_major_formatter(EngFormatter(sep="") if unit_formatter else FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _tokens_text(tokens: float | None) -> str:
    if tokens is None or not math.isfinite(tokens):
        return ""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= scale:
            return f"{tokens / scale:.3g}{unit}"
    return f"{tokens:.0f}"


def _edge_note(series: list[SweepSeries]) -> list[str]:
    """Stars on an end of their grid: lr* and objective* there are only bounds."""
    names = [s.name for s in series if s.fit is not None and s.fit.at_edge and s.fit.n_points > 1]
    return [f"lr* at the grid's edge (only a bound; widen the grid): {', '.join(names)}"] if names else []


def _caption(fig, lines: list[str]) -> None:
    """Text under the axes (kept by `save`'s tight bounding box)."""
    if lines:
        fig.text(0.01, -0.01, "\n".join(lines), ha="left", va="top", fontsize=7.5, family="monospace")


# --- learning-rate sweeps ------------------------------------------------------------------


def _draw_sweep(ax, s: SweepSeries, color: str, marker: str) -> set[str]:
    """Draw one variant's sweep; returns the marks used (for the legend of marks)."""
    marks = set()
    if s.fit is not None and len(s.fit.curve_lrs) > 1:
        ax.plot(s.fit.curve_lrs, s.fit.curve_ppls, color=color, lw=1.5, alpha=0.9)
        marks.add("curve")
    rows = s.stats.by_lr if s.stats is not None else ()
    if any(r.n > 1 for r in rows):  # seeds: mean ± std, a band, the single seeds faintly
        lrs = [r.lr for r in rows]
        means = [r.mean for r in rows]
        stds = [r.std or 0.0 for r in rows]
        ax.fill_between(
            lrs,
            [m - d for m, d in zip(means, stds)],
            [m + d for m, d in zip(means, stds)],
            color=color,
            alpha=0.15,
            lw=0,
        )
        ax.errorbar(lrs, means, yerr=stds, fmt=marker, color=color, ms=5, capsize=3, zorder=3)
        marks |= {"mean", "band"}
        if s.finished:
            xs, ys = zip(*s.finished)
            ax.scatter(xs, ys, color=color, marker=".", s=8, alpha=0.4, zorder=2)
            marks.add("seeds")
    elif s.finished:
        xs, ys = zip(*sorted(s.finished))
        ax.scatter(xs, ys, color=color, marker=marker, s=28, zorder=3)
        marks.add("points")
    if s.fit is not None:
        ax.scatter(
            [s.fit.lr_star],
            [s.fit.ppl_star],
            marker="*",
            s=220,
            color=color,
            edgecolor="black",
            linewidth=0.7,
            zorder=4,
        )
        marks.add("star")
        optimum = s.stats.optimum if s.stats is not None else None
        if optimum is not None and optimum.lr_interval is not None:  # the star's 95% bootstrap intervals
            lo, hi = optimum.lr_interval, optimum.objective_interval
            assert hi is not None  # analysis.optimum.optimum_bounds gives an lr interval only with an objective one
            ax.errorbar(
                [s.fit.lr_star],
                [s.fit.ppl_star],
                xerr=[[max(s.fit.lr_star - lo.low, 0.0)], [max(lo.high - s.fit.lr_star, 0.0)]],
                yerr=[[max(s.fit.ppl_star - hi.low, 0.0)], [max(hi.high - s.fit.ppl_star, 0.0)]],
                fmt="none",
                ecolor="black",
                elinewidth=0.8,
                capsize=2,
                zorder=4,
            )
            marks.add("star_interval")
    if s.diverged:  # on the upper edge: their objective is not finite
        ax.scatter(
            s.diverged,
            [1.0] * len(s.diverged),
            marker="x",
            color=color,
            s=40,
            zorder=3,
            transform=ax.get_xaxis_transform(),
            clip_on=False,
        )
        marks.add("diverged")
    return marks


MARK_ORDER = (
    "points",
    "mean",
    "band",
    "seeds",
    "curve",
    "star",
    "star_interval",
    "diverged",
    "baseline",
    "variant",
    "link",
    "objective_interval",
    "law",
)


def _ordered(marks: set[str]) -> list[str]:
    return [m for m in MARK_ORDER if m in marks]


def _finish_lr_axes(ax, title: str, lrs: Sequence[float] = (), metric: str = "test perplexity") -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator

    ax.set_xscale("log", base=2)
    sampled = sorted(set(lrs))
    if 0 < len(sampled) <= MAX_LISTED_TICKS:  # a grid: ticks at its learning rates, as numbers
        ax.xaxis.set_major_locator(FixedLocator(sampled))
        ax.xaxis.set_minor_locator(NullLocator())
    else:  # many sampled values (tpe/random): decades and their 2x, 5x
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("learning rate (log scale)")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)


def plot_variant_fit(s: SweepSeries, path: str | Path, color: str | None = None) -> Path:
    """One variant's sweep; `color`: its colour in the study's other figures."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6), dpi=120)
    color = color or (BASELINE_COLOR if s.is_baseline else VARIANT_COLORS[0])
    marks = _draw_sweep(ax, s, color, "o")
    title = s.name
    if s.fit is not None:
        title += f"\nlr* = {s.fit.lr_star:.3g}, {s.metric}* = {s.fit.ppl_star:.4g}"
        if s.fit.at_edge and s.fit.n_points > 1:  # a one-point grid has no edge
            title += f" (at the {s.fit.edge} edge of the grid)"
    _finish_lr_axes(ax, title, [lr for lr, _ in s.finished] + s.diverged, s.metric)
    _legends(ax, [], _ordered(marks))
    return save(fig, path)


def figure_ppl_vs_lr(series: list[SweepSeries], title: str = "", palette: dict[str, str] | None = None):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.8), dpi=120)
    colors, markers = _colors(series, palette), _markers(series)
    marks, handles = set(), []
    for s in series:
        label = s.name + (f" [{s.group}]" if s.group and len(markers) > 1 else "")
        marks |= _draw_sweep(ax, s, colors[s.name], markers[s.group])
        handles.append(
            _variant_handle(
                colors[s.name], markers[s.group], label, line=s.fit is not None and len(s.fit.curve_lrs) > 1
            )
        )
    metric = series[0].metric if series else "test perplexity"
    _finish_lr_axes(
        ax,
        title or f"{metric} vs learning rate",
        [lr for s in series for lr, _ in s.finished] + [lr for s in series for lr in s.diverged],
        metric,
    )
    _caption(fig, _edge_note(series))
    _legends(ax, handles, _ordered(marks))
    return fig


def plot_ppl_vs_lr(
    series: list[SweepSeries], path: str | Path, title: str = "", palette: dict[str, str] | None = None
) -> Path:
    return save(figure_ppl_vs_lr(series, title, palette), path)


# --- optimum vs parameters -----------------------------------------------------------------


def _params_axis(ax, params: list[float]) -> None:
    """Parameters: a log axis over a wide range, a linear one over a narrow range (a log
    axis over 90K-110K has no decade to label and writes minor labels into each other)."""
    from matplotlib.ticker import EngFormatter, MaxNLocator

    if params and max(params) / min(params) > 3:
        ax.set_xscale("log")
        _log_ticks(ax.xaxis, params)
        ax.set_xlabel("parameters (log scale)")
        return
    ax.xaxis.set_major_locator(MaxNLocator(5))
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlabel("parameters")
    if params:
        span = max(max(params) - min(params), 0.1 * max(params))
        ax.set_xlim(min(params) - 0.25 * span, max(params) + 0.25 * span)


def figure_ppl_vs_params(
    series: list[SweepSeries], title: str = "", notes: Sequence[str] = (), palette: dict[str, str] | None = None
):
    """`notes`: lines written under the axes (the report's Δ and verdict per comparison)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.8), dpi=120)
    colors, markers, references = _colors(series, palette), _markers(series), _references(series)
    by_name = {s.name: s for s in series}
    plotted = [s for s in series if s.fit is not None and s.params]
    marks, handles = set(), []
    for s in plotted:  # links first, under the markers
        assert s.fit is not None  # `plotted` keeps the series with a fit
        base = by_name.get(s.baseline_name or "")
        if base is not None and base.fit is not None and base.params:
            ax.plot([s.params, base.params], [s.fit.ppl_star, base.fit.ppl_star], color="gray", lw=1, ls="--", zorder=1)
            marks.add("link")
    tokens = {_tokens_text(s.tokens) for s in plotted} - {""}
    for s in plotted:
        assert s.fit is not None  # `plotted` keeps the series with a fit
        is_reference = s.family_name in references or s.is_baseline
        marker = "D" if is_reference else "o"
        marks.add("baseline" if is_reference else "variant")
        ax.scatter(
            [s.params],
            [s.fit.ppl_star],
            zorder=3,
            edgecolor="black",
            linewidth=0.5,
            marker=marker,
            color=colors[s.name],
            s=60 if is_reference else 50,
        )
        label = s.name + (f" [{s.group}]" if s.group and len(markers) > 1 else "")
        handles.append(_variant_handle(colors[s.name], marker, label, line=False))
        optimum = s.stats.optimum if s.stats is not None else None
        if optimum is not None and optimum.objective_interval is not None:
            iv = optimum.objective_interval
            ax.errorbar(
                [s.params],
                [s.fit.ppl_star],
                yerr=[[max(s.fit.ppl_star - iv.low, 0.0)], [max(iv.high - s.fit.ppl_star, 0.0)]],
                fmt="none",
                ecolor=colors[s.name],
                capsize=3,
                zorder=2,
            )
            marks.add("objective_interval")
        if len(tokens) > 1:  # differing budgets: each point says its own
            ax.annotate(
                f"{_tokens_text(s.tokens)} tokens",
                (s.params, s.fit.ppl_star),
                textcoords="offset points",
                xytext=(0, 7),
                ha="center",
                fontsize=7,
            )
    _params_axis(ax, [float(s.params) for s in plotted if s.params])  # each has its size (`plotted`)
    metric = series[0].metric if series else "test perplexity"
    ax.yaxis.set_minor_formatter(_null_formatter())
    ax.set_ylabel(f"{metric}* (Akima optimum)")
    ax.set_title(title or f"{metric}* vs parameters", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    caption = []
    if len(tokens) == 1:
        caption.append(f"Every point trained on {next(iter(tokens))} tokens per trial.")
    elif len(tokens) > 1:
        caption.append("Point labels: training tokens per trial.")
    if not any(
        s.stats is not None and s.stats.optimum is not None and s.stats.optimum.objective_interval for s in plotted
    ):
        caption.append(f"No interval on {metric}* (fewer than 3 seeds): a gap between points may be noise.")
    caption += _edge_note(plotted) + list(notes)
    _caption(fig, caption)
    _legends(ax, handles, _ordered(marks))
    return fig


def _null_formatter():
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def plot_ppl_vs_params(
    series: list[SweepSeries],
    path: str | Path,
    title: str = "",
    notes: Sequence[str] = (),
    palette: dict[str, str] | None = None,
) -> Path:
    return save(figure_ppl_vs_params(series, title, notes, palette), path)


# --- scaling -------------------------------------------------------------------------------


def figure_scaling(summary, metric: str = "test perplexity", title: str = "", palette: dict[str, str] | None = None):
    """Objective* vs parameters and vs training FLOPs per family, with the power laws."""
    import numpy as np
    from matplotlib.ticker import NullFormatter

    from cem_ablate.analysis.scaling import FLOPS, PARAMS, SATURATING

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), dpi=120)
    families = list(summary.points)
    baseline_families = {m.baseline_family for ms in summary.points.values() for m in ms if m.baseline_family}
    if palette is None:
        palette, i = {}, 0
        for f in families:
            if f in baseline_families:
                palette[f] = BASELINE_COLOR
            else:
                palette[f] = VARIANT_COLORS[i % len(VARIANT_COLORS)]
                i += 1
    marks = set()
    for ax, axis in zip(axes, (PARAMS, FLOPS)):
        handles = []
        for family in families:
            members = [m for m in summary.points[family] if m.stats.optimum is not None]
            if not members:
                continue
            color = palette.get(family, VARIANT_COLORS[0])
            xs = [m.params if axis == PARAMS else m.train_flops for m in members]
            ys = [m.stats.optimum.objective_star for m in members]
            low = [
                y - (m.stats.optimum.objective_interval.low if m.stats.optimum.objective_interval else y)
                for m, y in zip(members, ys)
            ]
            high = [
                (m.stats.optimum.objective_interval.high if m.stats.optimum.objective_interval else y) - y
                for m, y in zip(members, ys)
            ]
            if any(low) or any(high):
                marks.add("objective_interval")
            law = summary.laws.get((family, axis))
            form = "a·x^-b + c" if law is not None and law.form == SATURATING else "log-log line"
            label = family + (f" ({form}, b = {law.b:.2f})" if law else "")
            marker = "D" if family in baseline_families else "o"
            marks.add("baseline" if family in baseline_families else "variant")
            ax.errorbar(xs, ys, yerr=[low, high], fmt=marker, color=color, capsize=3, zorder=3)
            handles.append(_variant_handle(color, marker, label, line=law is not None))
            if law is not None:
                grid = np.geomspace(min(xs), max(xs), 100)
                ax.plot(grid, [law(x) for x in grid], color=color, lw=1.2, alpha=0.8)
                marks.add("law")
        ax.set_xscale("log")
        _log_ticks(
            ax.xaxis,
            [
                x
                for f in families
                for m in summary.points[f]
                for x in ([m.params] if axis == PARAMS else [m.train_flops])
            ],
        )
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{axis} (log scale)")
        ax.set_ylabel(f"{metric}* (Akima optimum)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(handles=handles, title="family (fit)", fontsize=7, title_fontsize=7, loc="best")
    axes[-1].add_artist(axes[-1].get_legend())
    axes[-1].legend(
        handles=_mark_handles(axes[-1], _ordered(marks)),
        title="marks",
        fontsize=7,
        title_fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
    )
    fig.suptitle(title or f"{metric}: scaling per family (power-law fits)")
    return fig


def plot_scaling(
    summary, path: str | Path, metric: str = "test perplexity", title: str = "", palette: dict[str, str] | None = None
) -> Path:
    return save(figure_scaling(summary, metric, title, palette), path)
