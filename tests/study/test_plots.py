"""Figures with seeds: error bars, bands, intervals and the task's metric on the axis."""

import numpy as np
from PIL import Image

from cem_ablate.analysis.scaling import summarize_scaling
from cem_ablate.analysis.statistics import Observation, variant_stats
from cem_ablate.study.plots import SweepSeries, plot_ppl_vs_lr, plot_ppl_vs_params, plot_scaling, plot_variant_fit
from tests.analysis.test_scaling import inputs

GRID = [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]


def series(name, offset, is_baseline=False, params=1000):
    rng = np.random.default_rng(len(name))
    obs = [Observation(lr, s, 1.0 + 0.1 * (np.log2(lr) + 9.5) ** 2 + offset + 0.05 * rng.normal())
           for lr in GRID for s in range(3)]
    stats = variant_stats(obs, n_resamples=300)
    return SweepSeries(name, is_baseline, [(o.lr, o.value) for o in obs], diverged=[8e-3] if offset else [],
                       fit=stats.optimum.fit, params=params, stats=stats, metric="test RMSE",
                       baseline_name=None if is_baseline else "base")


def drawn(path):
    image = np.asarray(Image.open(path).convert("L"))
    return image.shape[0] > 100 and (image < 250).mean() > 0.02  # something besides white


def test_figures_with_seed_statistics_render(tmp_path):
    s = [series("base", 0.0, True, 1200), series("cem", -0.1, False, 1000)]
    assert drawn(plot_variant_fit(s[1], tmp_path / "fit.png"))
    assert drawn(plot_ppl_vs_lr(s, tmp_path / "lr.png"))
    assert drawn(plot_ppl_vs_params(s, tmp_path / "params.png"))
    summary = summarize_scaling(inputs(seeds=(0, 1, 2), spread=0.1), n_resamples=100)
    assert drawn(plot_scaling(summary, tmp_path / "scaling.png", metric="test RMSE"))


def test_only_each_groups_first_baseline_wears_the_baseline_colour():
    # Fig. 2c: Llama is every variant's first baseline, T = 1 a second one (of T = 2);
    # Table 3: one T = 1 per kernel, in the same group. Each needs a colour of its own.
    from dataclasses import replace

    from cem_ablate.study.plots import BASELINE_COLOR, _colors

    llama = series("llama", 0.0, True)
    t1 = replace(series("T1", 0.1, True), baseline_name="llama")
    t2 = replace(series("T2", 0.2), baseline_name="llama")
    colors = _colors([t1, t2, llama])
    assert colors["llama"] == BASELINE_COLOR and len(set(colors.values())) == 3
    rbf, ns = series("rbf_T1", 0.0, True), series("ns_T1", 0.1, True)
    deeper = [replace(series("rbf_T4", 0.0), baseline_name="rbf_T1"), replace(series("ns_T4", 0.0), baseline_name="ns_T1")]
    colors = _colors([rbf, *deeper, ns])
    assert colors["rbf_T1"] == BASELINE_COLOR and colors["ns_T1"] != BASELINE_COLOR and len(set(colors.values())) == 4
