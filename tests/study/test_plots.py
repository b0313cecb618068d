"""Figures with seeds: error bars, bands, intervals and the task's metric on the axis."""

import numpy as np
from PIL import Image

from cem_ablate.study.plots import SweepSeries, plot_ppl_vs_lr, plot_ppl_vs_params, plot_scaling, plot_variant_fit
from cem_ablate.study.scaling import summarize_scaling
from cem_ablate.study.statistics import Observation, variant_stats
from tests.study.test_scaling import inputs

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
