"""The exact-GP floor of a GP study's draws: what the best possible
predictor reaches on each draw's test split.

The draw is the data module's own (`data.gp.cached_gp`: the cached splits the trials
trained on, drawn by `sample_gp` where missing; `kernel_matrix`) and scored by the
exact posterior mean with the true kernel and noise (`analysis.gp_draws.posterior_rmse`).
The latent draw was made with `data.gp.JITTER` on the diagonal, so that counts as
noise here. Cost: one Cholesky of n_train² (4,096: about a second) per draw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cem_ablate.analysis.gp_draws import posterior_rmse

if TYPE_CHECKING:
    from cem_ablate.data.config import GPConfig


def exact_gp_rmse(gp_config: GPConfig) -> float:
    """Test RMSE of the exact GP posterior mean on the draw `gp_config` (a GPConfig)."""
    import numpy as np

    from cem_ablate.data.gp import JITTER, cached_gp, kernel_matrix

    data = cached_gp(gp_config)
    x_train, y_train = data["train"]
    x_test, y_test = data["test"]
    x = np.concatenate([x_train, x_test]).astype(np.float64)
    k = kernel_matrix(x, gp_config)
    n = len(x_train)
    return posterior_rmse(k[:n, :n], k[n:, :n], y_train, y_test, gp_config.noise**2 + JITTER)
