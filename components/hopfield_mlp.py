"""Hopfield MLP: T descent steps on a ReLU Hopfield energy (docs/design/energy-lens.md#s11-3-energy-transformer-block, Energy Transformer).

    E(u) = -1/2 ||ReLU(Xi u)||^2   summed over positions,    Xi in R^{D_m x D}
    x^{t+1} = x^t + eta P Xi^T ReLU(Xi u),   u = RMSNorm(x^t)    (= x - grad E at u for P = I)

One tied matrix `xi` (a bias-free nn.Linear(D, D_m)) reads the state and writes the
update back; the energy has no context term, so nothing is computed once per block but
the read-out Xi P (times eta on the fast path), folded once per forward as in the CEM
MLP. At T = 1, P = I it is a tied-weight ReLU MLP, h + Xi^T ReLU(Xi RMSNorm(h)).
D_m = round(width_multiplier * d_mlp). The options are the CEM MLP's (preconditioner,
step size, `recursion_state`, `backprop_steps`, the docs/design/energy-lens.md#s11-1-momentum momentum, checkpointing),
run by the shared recursion of `components.energy_recursion`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cem_ablate.config.dims import ModelDims
from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.registry import register
from components.cem_mlp import MLP_PRECONDITIONER_RANK, CEMMLPOptions
from components.energy_recursion import EnergyRecursion
from components.preconditioner import build_preconditioner


@register(
    "mlp",
    "hopfield",
    options=CEMMLPOptions,
    description="Hopfield MLP (Energy Transformer): one tied D x D_m matrix, energy -1/2 ||ReLU(Xi u)||^2, "
    "T descent steps.",
)
class HopfieldMLP(EnergyRecursion):
    def __init__(self, dims: ModelDims, options: CEMMLPOptions, steps: int = 1):
        super().__init__(steps, options)
        self.impl = options.impl
        d_model = dims.d_model
        d_mlp = round(dims.d_mlp * options.width_multiplier)
        self.norm = RMSNorm(d_model, dims.norm_eps)
        self.xi = linear(d_model, d_mlp, dims.init_std)  # memories: read-in Xi and tied read-out Xi^T
        self.precond = build_preconditioner(options.preconditioner, d_model, None, MLP_PRECONDITIONER_RANK)

    def parameter_classes(self) -> dict[str, str]:
        """muP: Xi is D_m x D, used as Xi and Xi^T (tied): hidden in both uses."""
        return {"xi.weight": "hidden"}

    def readout(self) -> torch.Tensor:
        """(D_m, D) matrix Xi P: applies P Xi^T to row vectors in one matmul."""
        return self.precond.fold(self.xi.weight)

    # -- the step protocol (components.energy_recursion, docs/design/energy-lens.md#s11-energy-lens) -----------------
    def step_context(self, c: torch.Tensor) -> torch.Tensor:
        """The read-out Xi P (times eta on the fast path): the energy has no context term."""
        return self.readout() if self.impl == "reference" else self.scaled_readout(self.readout())

    def direction(self, u: torch.Tensor, readout: torch.Tensor) -> torch.Tensor:
        """eta P Xi^T ReLU(Xi u): shape (B, J, D)."""
        if self.impl == "reference":
            return self.step_size * (F.relu(self.xi(u)) @ readout)
        return F.relu(self.xi(u)) @ readout  # eta folded into the read-out

    def step_energy(self, u: torch.Tensor, readout: torch.Tensor | None = None) -> torch.Tensor:
        return -0.5 * F.relu(self.xi(u)).square().sum(dim=(1, 2))

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """E(x) summed over positions: shape (B,) (h is unused: no context term)."""
        return self.step_energy(x)

    def flops_once(self, seq_len: int) -> float:
        return 0.0

    def direction_flops(self, seq_len: int) -> float:
        d, m = self.xi.in_features, self.xi.out_features
        return 2 * d * m + 2 * m * d + m  # Xi u, ReLU, read-out
