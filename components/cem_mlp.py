"""CEM MLP: T gradient steps on the element-wise energy (docs/design/layers.md#s3-cem-mlp, paper §2.2).

    xi(x | c) = -gamma^T phi(V x),   gamma = W c,   phi(z) = ∫_0^z SiLU
    x^{t+1} = x^t + eta P V^T (gamma ⊙ SiLU(V u)),   u = RMSNorm(x^t)

gamma is computed once per block. At T = 1, P = I this is SwiGLU with
gate_proj = V, down_proj = V^T, up_proj = W: two D_m x D matrices instead of three.

`impl: fast` (default) and `impl: reference` compute the same function (tests hold
them to 1e-9 in float64). Both compute gamma once and fold P into the read-out,
(D_m, D) = V P (NOTES.md: far cheaper than applying P to every token); the fast path
also folds eta into that matrix and reuses the context c = RMSNorm(h) as the first
query state (u^0 = c), saving one norm and one scaling pass per block.
`recursion_state` (x^0 = h or c), `backprop_steps` (truncated backpropagation) and
`update`/`momentum` (docs/design/energy-lens.md#s11-1-momentum) are the shared recursion options of
`components.energy_recursion` (docs/design/layers.md#s3-cem-mlp), which runs the steps through this module's
step protocol (`step_context`, `direction`, `step_energy`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from cem_ablate.config.dims import ModelDims
from cem_ablate.config.schema import require
from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.registry import register
from components.energy_recursion import EnergyRecursion, RecursionOptions
from components.preconditioner import PreconditionerConfig, build_preconditioner

MLP_PRECONDITIONER_RANK = 16  # paper, Appendix C.4
QUADRATURE_POINTS = 40  # Gauss-Legendre; error < 1e-13 for |z| <= 30 (checked against Li2)


@cache
def _gauss_legendre(n: int):
    nodes, weights = np.polynomial.legendre.leggauss(n)
    return torch.from_numpy(nodes), torch.from_numpy(weights)


def silu_integral(z: torch.Tensor) -> torch.Tensor:
    """phi(z) = ∫_0^z SiLU(t) dt = z softplus(z) + Li2(-e^z) + pi^2/12, by quadrature."""
    nodes, weights = (t.to(dtype=z.dtype, device=z.device) for t in _gauss_legendre(QUADRATURE_POINTS))
    t = (nodes + 1) * (z.unsqueeze(-1) / 2)
    return (z / 2) * (F.silu(t) * weights).sum(-1)


class MLPStepContext(NamedTuple):
    """What every step reads, computed once per block from the context c (docs/design/layers.md#s3-cem-mlp)."""

    gamma: torch.Tensor  # (B, J, D_m) W c
    readout: torch.Tensor  # (D_m, D) V P; times eta on the fast path


@dataclass(frozen=True)
class CEMMLPOptions(RecursionOptions):
    preconditioner: PreconditionerConfig = field(default_factory=PreconditionerConfig)
    width_multiplier: float = 1.0  # 1.5 matches the parameters of SwiGLU (docs/design/layers.md#s3-cem-mlp)
    impl: Literal["fast", "reference"] = "fast"  # reference: the plain docs/design/layers.md#s3-cem-mlp loop, for tests

    def validate(self, path: str) -> None:
        self.validate_recursion(path)
        require(self.width_multiplier > 0, f"{path}.width_multiplier", f"must be > 0, got {self.width_multiplier}.")

    def check_dims(self, dims: ModelDims, path: str) -> None:
        rank = self.preconditioner.rank
        if self.preconditioner.name == "diag_lowrank" and rank is not None:
            require(
                rank < dims.d_model,
                f"{path}.preconditioner.rank",
                f"rank {rank} must be smaller than d_model={dims.d_model}.",
            )


@dataclass(frozen=True)
class CEMMLPParamMatchedOptions(CEMMLPOptions):
    width_multiplier: float = 1.5


@register(
    "mlp",
    "cem",
    options=CEMMLPOptions,
    description="CEM MLP: tied W/V (two D x D_m matrices), gamma once, T energy-descent steps.",
)
class CEMMLP(EnergyRecursion):
    def __init__(self, dims: ModelDims, options: CEMMLPOptions, steps: int = 1):
        super().__init__(steps, options)
        self.impl = options.impl
        d_model = dims.d_model
        d_mlp = round(dims.d_mlp * options.width_multiplier)
        self.norm = RMSNorm(d_model, dims.norm_eps)
        self.w = linear(d_model, d_mlp, dims.init_std)  # linear branch: gamma = W c
        self.v = linear(d_model, d_mlp, dims.init_std)  # SiLU branch and tied read-out
        self.precond = build_preconditioner(options.preconditioner, d_model, None, MLP_PRECONDITIONER_RANK)

    def parameter_classes(self) -> dict[str, str]:
        """muP classes (cem_ablate/model/parametrization.py): W (gamma = W c) and V, used as V
        (the SiLU branch) and V^T (the tied read-out), are D_m x D with D_m ∝ D: both dims grow
        with width in both uses, so both are hidden. The preconditioner declares its own."""
        return {"w.weight": "hidden", "v.weight": "hidden"}

    def readout(self) -> torch.Tensor:
        """(D_m, D) matrix V P: applies P V^T to row vectors in one matmul."""
        return self.precond.fold(self.v.weight)

    # -- the step protocol (components.energy_recursion, docs/design/energy-lens.md#s11-energy-lens) -----------------
    def step_context(self, c: torch.Tensor) -> MLPStepContext:
        """gamma = W c and the read-out, once per block."""
        gamma = self.w(c)
        readout = self.readout() if self.impl == "reference" else self.scaled_readout(self.readout())
        return MLPStepContext(gamma, readout)

    def direction(self, u: torch.Tensor, ctx: MLPStepContext) -> torch.Tensor:
        """eta P V^T (gamma ⊙ SiLU(V u)): shape (B, J, D)."""
        if self.impl == "reference":
            return self.step_size * ((ctx.gamma * F.silu(self.v(u))) @ ctx.readout)
        return (ctx.gamma * F.silu(self.v(u))) @ ctx.readout  # eta folded into the read-out

    def step_energy(self, u: torch.Tensor, ctx: MLPStepContext) -> torch.Tensor:
        return self._energy(u, ctx.gamma)

    def _energy(self, x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        return -(gamma * silu_integral(self.v(x))).sum(dim=(1, 2))

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """xi(x | norm(h)) summed over positions: shape (B,)."""
        return self._energy(x, self.w(self.norm(h)))

    def flops_once(self, seq_len: int) -> float:
        return 2 * self.v.in_features * self.v.out_features  # gamma = W c once per block

    def direction_flops(self, seq_len: int) -> float:
        d, m = self.v.in_features, self.v.out_features
        return 2 * d * m + 2 * m * d + 2 * m


register(
    "mlp",
    "cem_param_matched",
    options=CEMMLPParamMatchedOptions,
    description="CEM MLP widened 1.5x: parameter-matched to SwiGLU (3·D·D_m).",
)(CEMMLP)
