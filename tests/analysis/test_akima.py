import math

import numpy as np
import pytest
from scipy.interpolate import Akima1DInterpolator

from cem_ablate.analysis.akima import fit_akima

PAPER_GRID = [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]


def scipy_minimum(lrs, ppls, dense=2001):
    x = np.log2(lrs)
    xs = np.linspace(x[0], x[-1], dense)
    ys = Akima1DInterpolator(x, ppls)(xs)
    i = int(np.argmin(ys))
    return 2.0 ** xs[i], ys[i], i


def test_equals_scipy_on_known_data():
    ppls = [31.2, 27.9, 26.1, 26.8, 29.5]
    fit = fit_akima(zip(PAPER_GRID, ppls))
    lr, ppl, i = scipy_minimum(PAPER_GRID, ppls)
    assert fit.lr_star == pytest.approx(lr, rel=1e-12)
    assert fit.ppl_star == pytest.approx(ppl, rel=1e-12)
    assert fit.edge is None and 0 < i < 2000
    assert 1e-3 < fit.lr_star < 4e-3  # the interior optimum lies between the neighbours of the best point
    assert fit.ppl_star <= min(ppls)
    # the curve passes through the data
    curve = dict(zip(np.round(np.log2(fit.curve_lrs), 9), fit.curve_ppls))
    assert curve[round(math.log2(5e-4), 9)] == pytest.approx(31.2)
    assert curve[round(math.log2(8e-3), 9)] == pytest.approx(29.5)


def test_recovers_the_optimum_of_a_parabola_in_log_lr():
    true_lr = 2.0**-9.3
    ppls = [20 + (math.log2(lr) - math.log2(true_lr)) ** 2 for lr in PAPER_GRID]
    fit = fit_akima(zip(PAPER_GRID, ppls))
    assert fit.lr_star == pytest.approx(true_lr, rel=0.05)
    assert fit.ppl_star == pytest.approx(20.0, abs=0.05)


@pytest.mark.parametrize(
    "ppls, edge, lr",
    [
        ([40, 35, 31, 29, 28], "high", 8e-3),  # still improving at the largest lr
        ([28, 29, 31, 35, 40], "low", 5e-4),
    ],
)
def test_minimum_on_the_edge_is_flagged(ppls, edge, lr):
    fit = fit_akima(zip(PAPER_GRID, ppls))
    assert fit.edge == edge and fit.at_edge
    assert fit.lr_star == pytest.approx(lr)


def test_diverged_points_are_excluded_and_seeds_averaged():
    points = [
        (5e-4, 30.0),
        (1e-3, 27.0),
        (1e-3, 29.0),
        (2e-3, 26.0),
        (4e-3, 27.5),
        (8e-3, math.inf),
        (8e-3, math.nan),
        (8e-3, None),
    ]
    fit = fit_akima(points)
    assert fit.lrs == (5e-4, 1e-3, 2e-3, 4e-3)
    assert fit.ppls == (30.0, 28.0, 26.0, 27.5)
    lr, ppl, _ = scipy_minimum([5e-4, 1e-3, 2e-3, 4e-3], [30.0, 28.0, 26.0, 27.5])
    assert (fit.lr_star, fit.ppl_star) == (pytest.approx(lr), pytest.approx(ppl))


def test_too_few_points():
    assert fit_akima([(1e-3, math.inf)]) is None
    single = fit_akima([(1e-3, 30.0)])
    assert (single.lr_star, single.ppl_star, single.at_edge) == (1e-3, 30.0, True)
