"""Figures a reviewer accepts: error bars, bands, intervals and the task's metric on the
axis; a legend for every mark, one colour per variant in every figure, tick labels that
do not overlap at any range, the verdict under the objective*-vs-parameters figure, an
SVG beside every PNG."""

from dataclasses import replace

import numpy as np
from matplotlib.colors import to_hex
from matplotlib.legend import Legend
from PIL import Image

from cem_ablate.analysis.scaling import summarize_scaling
from cem_ablate.analysis.statistics import Observation, variant_stats
from cem_ablate.figures.plots import (
    BASELINE_COLOR,
    SweepSeries,
    declutter_ticks,
    figure_ppl_vs_lr,
    figure_ppl_vs_params,
    figure_scaling,
    plot_ppl_vs_lr,
    plot_ppl_vs_params,
    plot_scaling,
    plot_variant_fit,
    variant_colors,
)
from tests.analysis.test_scaling import inputs

GRID = [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]


def series(name, offset, is_baseline=False, params=1000, seeds=3, grid=GRID):
    rng = np.random.default_rng(len(name))
    obs = [
        Observation(lr, s, 1.0 + 0.1 * (np.log2(lr) + 9.5) ** 2 + offset + 0.05 * rng.normal())
        for lr in grid
        for s in range(seeds)
    ]
    stats = variant_stats(obs, n_resamples=300)
    return SweepSeries(
        name,
        is_baseline,
        [(o.lr, o.value) for o in obs],
        diverged=[8e-3] if offset else [],
        fit=stats.optimum.fit,
        params=params,
        stats=stats,
        metric="test RMSE",
        baseline_name=None if is_baseline else "base",
        tokens=246_000,
    )


def study_series(seeds=3, params=(101_000, 93_400, 109_500)):
    """The quickstart's shape: Llama and two CEM variants compared with it."""
    return [
        series("llama", 0.0, True, params[0], seeds),
        replace(series("cem_attention", -0.1, False, params[1], seeds), baseline_name="llama"),
        replace(series("full_cem_T2", 0.05, False, params[2], seeds), baseline_name="llama"),
    ]


def drawn(path):
    image = np.asarray(Image.open(path).convert("L"))
    return image.shape[0] > 100 and (image < 250).mean() > 0.02  # something besides white


def legend_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for legend in ax.findobj(Legend) for t in legend.get_texts()]


def legend_colors(fig) -> dict[str, str]:
    """Variant legend entry -> the colour of its handle."""
    out = {}
    for ax in fig.axes:
        for legend in ax.findobj(Legend):
            if legend.get_title().get_text() != "marks":
                for handle, text in zip(legend.legend_handles, legend.get_texts()):
                    out[text.get_text()] = to_hex(handle.get_color())
    return out


def drawn_colors(fig) -> set[str]:
    """Face colours of every scatter/errorbar point and line actually drawn in the axes."""
    out = set()
    for ax in fig.axes:
        for collection in ax.collections:
            out |= {to_hex(c) for c in collection.get_facecolors()} | {to_hex(c) for c in collection.get_edgecolors()}
        out |= {to_hex(line.get_color()) for line in ax.lines}
    return out


def overlapping_tick_labels(fig) -> list[tuple[str, str]]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    pairs = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            labels = [
                t
                for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True)
                if t.get_visible()
                and t.get_text()
                and low <= t.get_position()[0 if axis.axis_name == "x" else 1] <= high
            ]
            boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels]
            pairs += [
                (a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1 :] if box_a.overlaps(box_b)
            ]
    return pairs


def test_figures_with_seed_statistics_render_with_an_svg_beside_each_png(tmp_path):
    s = [series("base", 0.0, True, 1200), series("cem", -0.1, False, 1000)]
    paths = [
        plot_variant_fit(s[1], tmp_path / "fit.png"),
        plot_ppl_vs_lr(s, tmp_path / "lr.png"),
        plot_ppl_vs_params(s, tmp_path / "params.png"),
    ]
    summary = summarize_scaling(inputs(seeds=(0, 1, 2), spread=0.1), n_resamples=100)
    paths.append(plot_scaling(summary, tmp_path / "scaling.png", metric="test RMSE"))
    for path in paths:
        assert drawn(path)
        assert "<svg" in path.with_suffix(".svg").read_text()


def test_every_mark_has_a_legend_entry():
    s = study_series()
    texts = legend_texts(figure_ppl_vs_lr(s))
    assert {"llama", "cem_attention", "full_cem_T2"} <= set(texts)
    for mark in (
        "seed mean ± std",
        "band: seed mean ± std",
        "single seeds",
        "Akima interpolation over log2(lr)",
        "lr*, objective*: Akima optimum",
        "95% intervals of lr*, objective*",
        "diverged (not finite; on the top edge)",
    ):
        assert mark in texts, mark
    texts = legend_texts(figure_ppl_vs_params(s))
    for mark in (
        "llama",
        "cem_attention",
        "baseline (diamond)",
        "variant (dot)",
        "dashed: variant to its baseline",
        "95% interval of objective*",
    ):
        assert mark in texts, mark
    one_seed = legend_texts(figure_ppl_vs_lr(study_series(seeds=1)))
    assert "one trial (seed)" in one_seed and "seed mean ± std" not in one_seed  # only what is drawn
    summary = summarize_scaling(inputs(seeds=(0, 1, 2), spread=0.1), n_resamples=100)
    texts = legend_texts(figure_scaling(summary, "test RMSE"))
    assert "fitted power law" in texts and "95% interval of objective*" in texts


def test_a_variant_has_one_colour_in_every_figure():
    s = study_series()
    palette = variant_colors(s)
    assert palette["llama"] == BASELINE_COLOR and len(set(palette.values())) == 3
    by_lr, by_params = figure_ppl_vs_lr(s, palette=palette), figure_ppl_vs_params(s, palette=palette)
    lr_colors, params_colors = legend_colors(by_lr), legend_colors(by_params)
    for name in palette:
        assert lr_colors[name] == params_colors[name] == palette[name]
        assert palette[name] in drawn_colors(by_lr) and palette[name] in drawn_colors(by_params)
    # sizes of one family share its colour (markers tell them apart); the scaling figure agrees
    summary = summarize_scaling(inputs(seeds=(0, 1, 2), spread=0.1), n_resamples=100)
    families = [
        SweepSeries(f, f == "llama", [], baseline_name=None if f == "llama" else "llama") for f in summary.points
    ]
    palette = variant_colors(families)
    scaling = legend_colors(figure_scaling(summary, "test RMSE", palette=palette))
    assert {name.split(" (")[0]: c for name, c in scaling.items()} == palette


def test_only_each_groups_first_baseline_wears_the_baseline_colour():
    # Fig. 2c: Llama is every variant's first baseline, T = 1 a second one (of T = 2);
    # Table 3: one T = 1 per kernel, in the same group. Each needs a colour of its own.
    llama = series("llama", 0.0, True)
    t1 = replace(series("T1", 0.1, True), baseline_name="llama")
    t2 = replace(series("T2", 0.2), baseline_name="llama")
    colors = variant_colors([t1, t2, llama])
    assert colors["llama"] == BASELINE_COLOR and len(set(colors.values())) == 3
    rbf, ns = series("rbf_T1", 0.0, True), series("ns_T1", 0.1, True)
    deeper = [
        replace(series("rbf_T4", 0.0), baseline_name="rbf_T1"),
        replace(series("ns_T4", 0.0), baseline_name="ns_T1"),
    ]
    colors = variant_colors([rbf, *deeper, ns])
    assert colors["rbf_T1"] == BASELINE_COLOR and colors["ns_T1"] != BASELINE_COLOR and len(set(colors.values())) == 4


def test_tick_labels_do_not_overlap_at_any_range():
    figures = [
        figure_ppl_vs_params(study_series(params=p))
        for p in ((101_000, 93_400, 109_500), (99_000, 100_000, 101_000), (2_000, 90_000, 3_000_000_000))
    ]
    tpe = [
        replace(series(f"v{i}", 0.01 * i, grid=list(np.geomspace(1e-5, 0.3, 40)), seeds=1), diverged=[])
        for i in range(2)
    ]
    figures.append(figure_ppl_vs_lr(tpe))  # 40 sampled learning rates over 4.5 decades
    summary = summarize_scaling(inputs(seeds=(0, 1, 2), spread=0.1), n_resamples=100)
    figures.append(figure_scaling(summary, "test RMSE"))
    for fig in figures:
        declutter_ticks(fig)
        assert overlapping_tick_labels(fig) == []
        assert all(
            sum(t.get_visible() and bool(t.get_text()) for t in ax.xaxis.get_ticklabels()) >= 2 for ax in fig.axes
        )  # still labelled


def test_declutter_removes_overlaps_a_dense_fixed_axis_has():
    from matplotlib.ticker import FixedLocator

    fig = figure_ppl_vs_lr(study_series())
    fig.axes[0].xaxis.set_major_locator(FixedLocator(list(np.geomspace(5e-4, 8e-3, 30))))
    assert overlapping_tick_labels(fig)  # the check sees overlaps ...
    declutter_ticks(fig)
    assert overlapping_tick_labels(fig) == []  # ... and decluttering removes them


def test_the_verdict_and_the_tokens_are_written_on_the_figure_and_the_bars_fit_the_y_range():
    s = study_series()
    notes = ["Δ = variant − baseline", "  cem_attention − llama at optima: -0.1 [-0.3, +0.1]: unresolved"]
    fig = figure_ppl_vs_params(s, notes=notes)
    texts = [t.get_text() for t in fig.texts]
    assert any(notes[1] in t for t in texts)
    assert any("246K tokens per trial" in t for t in texts)
    assert not [t for ax in fig.axes for t in ax.texts if t.get_text().endswith("K")]  # no unexplained "246K"
    low, high = fig.axes[0].get_ylim()
    for x in s:
        iv = x.stats.optimum.objective_interval
        assert low <= iv.low and iv.high <= high
    one_seed = figure_ppl_vs_params(study_series(seeds=1))
    assert any("No interval on test RMSE*" in t.get_text() for t in one_seed.texts)


def test_the_study_logs_each_variants_figure_in_its_report_colour():
    from pathlib import Path

    from cem_ablate.figures.plots import VARIANT_COLORS, study_colors
    from cem_ablate.study.spec import load_study_mapping, parse_study
    from cem_ablate.study.variants import expand

    mapping = load_study_mapping(Path(__file__).resolve().parents[2] / "studies" / "quickstart.yaml")
    colors = study_colors(expand(parse_study(mapping), mapping).variants)
    # what the report's figures give them (study_series has the quickstart's shape)
    assert colors == variant_colors(study_series())
    assert colors == {"llama": BASELINE_COLOR, "cem_attention": VARIANT_COLORS[0], "full_cem_T2": VARIANT_COLORS[1]}


def test_a_star_on_the_grids_edge_is_called_a_bound_on_the_figure():
    edge = [
        series("llama", 0.0, True, grid=GRID[2:]),
        replace(series("cem", -0.1, grid=GRID[2:]), baseline_name="llama"),
    ]
    assert all(x.fit.at_edge for x in edge)  # the minimum of a rising curve: its first grid point
    for fig in (figure_ppl_vs_lr(edge), figure_ppl_vs_params(edge)):
        assert any(
            "lr* at the grid's edge (only a bound; widen the grid): llama, cem" in t.get_text() for t in fig.texts
        )
    assert not [t for t in figure_ppl_vs_lr(study_series()).texts if "edge" in t.get_text()]
