"""Table 3 with its noise: GP draws as the unit of replication (docs/design/experiments.md#s9-gaussian-process-study), pure.

The GP function is drawn once per `data.gp.data_seed`: model seeds on one draw are
not independent replications of the experiment (they share the function, its inputs
and its noise). So, per kernel and depth T:

- per draw: the seed mean of the test RMSE at the depth's own lr* grid point (each
  depth tuned on its draw), with a t interval over the seeds (within-draw noise only);
- pooled: the mean over draws of the per-draw seed means, with a t interval over the
  draws (df = draws − 1): the function draw is the unit;
- verdict of T vs T = 1: a paired t-test over draws of the per-draw seed-mean Δ (the
  draw pairs them: both depths saw that function), by `analysis.decision.decide` with
  the draws as its "seeds", one look; the report Holm-adjusts all depths and kernels
  as one family (`decision.adjust`).

`posterior_rmse` is the floor: the exact GP posterior mean with the true kernel and
noise (kernel ridge regression, the Bayes-optimal predictor under the prior the data
were drawn from), scored on the draw's test split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import linalg, stats

from cem_ablate.analysis.decision import ALPHA, Decision, Design, decide


@dataclass(frozen=True)
class MeanInterval:
    mean: float
    low: float | None  # None with fewer than 2 values
    high: float | None
    n: int


def t_interval(values: Sequence[float], alpha: float = ALPHA) -> MeanInterval:
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if len(x) == 0:
        return MeanInterval(math.nan, None, None, 0)
    mean = float(x.mean())
    if len(x) < 2:
        return MeanInterval(mean, None, None, 1)
    half = float(stats.t.ppf(1.0 - alpha / 2.0, len(x) - 1)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return MeanInterval(mean, mean - half, mean + half, len(x))


@dataclass(frozen=True)
class DepthDraws:
    """One depth of one kernel: draw -> {seed: test RMSE} at the depth's lr on that draw."""

    depth: int
    by_draw: Mapping[int, Mapping[int, float]]

    def draw_means(self) -> dict[int, float]:
        return {d: float(np.mean(list(v.values()))) for d, v in self.by_draw.items() if v}


@dataclass(frozen=True)
class DepthSummary:
    depth: int
    per_draw: dict[int, MeanInterval]  # over seeds, within the draw
    pooled: MeanInterval  # over the per-draw means: the draw is the unit


def summarize_depth(depth: DepthDraws, alpha: float = ALPHA) -> DepthSummary:
    per_draw = {d: t_interval(list(v.values()), alpha) for d, v in sorted(depth.by_draw.items())}
    return DepthSummary(depth.depth, per_draw, t_interval(list(depth.draw_means().values()), alpha))


def versus_shallow(depth: DepthDraws, shallow: DepthDraws, alpha: float = ALPHA) -> Decision:
    """Δ = depth − T = 1 of the per-draw seed means, paired t over the draws they share."""
    mine, theirs = depth.draw_means(), shallow.draw_means()
    n = len(set(mine) & set(theirs))
    return decide(mine, theirs, paired=True, design=Design.fixed(max(n, 1), alpha))


def posterior_rmse(
    k_train: np.ndarray, k_test_train: np.ndarray, y_train: np.ndarray, y_test: np.ndarray, noise_variance: float
) -> float:
    """Test RMSE of the exact GP posterior mean k*ᵀ (K + σ² I)⁻¹ y (float64 Cholesky);
    `noise_variance` σ²: everything added to the latent function's covariance."""
    k = np.asarray(k_train, dtype=np.float64) + noise_variance * np.eye(len(y_train))
    factor = linalg.cho_factor(k, lower=True)
    weights = linalg.cho_solve(factor, np.asarray(y_train, dtype=np.float64))
    mean = np.asarray(k_test_train, dtype=np.float64) @ weights
    return float(np.sqrt(np.mean((mean - np.asarray(y_test, dtype=np.float64)) ** 2)))
