"""Preconditioners for CEM updates (docs/design/layers.md#s4-preconditioners, paper §2.3 and Appendix C.4).

    P = diag(softplus(sqrt(D) p)) + U V^T + V U^T,  p init 1/sqrt(D), U ~ N(0, 0.02^2), V = 0

P is never built as a D x D matrix. Two ways to use it, both exact:
- `apply(y)`: P y for y of shape (..., D), or per head P_k y_k for y of shape (..., K, D);
- `fold(w)`: w P for a read-out matrix w of shape (N, D), or per head w_k P_k for
  w of shape (K, N, D). Folding P into the output matrix once per forward is much
  cheaper than applying it to every token (NOTES.md).
P is symmetric, so w P = (P w^T)^T: folding the read-out is the same update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cem_ablate.config.schema import require
from cem_ablate.registry import get, register


@dataclass(frozen=True)
class PreconditionerConfig:
    """`preconditioner:` inside a CEM sublayer; a bare string is shorthand for the name."""

    name: str = "identity"
    rank: int | None = None  # diag_lowrank only; None = the sublayer's paper default (4 / 16)

    def validate(self, path: str) -> None:
        get("preconditioner", self.name, f"{path}.name")
        if self.rank is not None:
            require(self.rank >= 1, f"{path}.rank", f"must be >= 1, got {self.rank}.")


def build_preconditioner(cfg: PreconditionerConfig, dim: int, heads: int | None, default_rank: int) -> nn.Module:
    spec = get("preconditioner", cfg.name)
    return spec.factory(dim=dim, heads=heads, rank=cfg.rank or default_rank)


@register("preconditioner", "identity", description="P = I (no extra parameters).")
class IdentityPreconditioner(nn.Module):
    def __init__(self, dim: int, heads: int | None, rank: int):
        super().__init__()

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        return y

    def fold(self, w: torch.Tensor) -> torch.Tensor:
        return w


@register("preconditioner", "diag", description="P = diag(softplus(sqrt(D) p)), one per head in attention.")
class DiagPreconditioner(nn.Module):
    def __init__(self, dim: int, heads: int | None, rank: int):
        super().__init__()
        self.scale = math.sqrt(dim)
        shape = (dim,) if heads is None else (heads, dim)
        self.p = nn.Parameter(torch.full(shape, 1.0 / math.sqrt(dim)))

    def parameter_classes(self) -> dict[str, str]:
        """muP (cem_ablate/model/parametrization.py): p enters as softplus(sqrt(D) p), so an Adam
        step of ~lr moves the entry by sqrt(D) lr; sqrt_width_vector scales p's lr by m^-1/2."""
        return {"p": "sqrt_width_vector"}

    def diagonal(self) -> torch.Tensor:
        return F.softplus(self.scale * self.p)

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        return self.diagonal().to(y.dtype) * y

    def fold(self, w: torch.Tensor) -> torch.Tensor:
        diag = self.diagonal().to(w.dtype)
        return w * (diag if diag.dim() == 1 else diag[:, None, :])


@register(
    "preconditioner",
    "diag_lowrank",
    description="P = diag(softplus(sqrt(D) p)) + U V^T + V U^T of rank R (paper: 4 attention, 16 MLP).",
)
class DiagLowRankPreconditioner(DiagPreconditioner):
    def __init__(self, dim: int, heads: int | None, rank: int):
        super().__init__(dim, heads, rank)
        shape = (dim, rank) if heads is None else (heads, dim, rank)
        self.u = nn.Parameter(torch.randn(shape) * 0.02)
        self.v = nn.Parameter(torch.zeros(shape))

    def parameter_classes(self) -> dict[str, str]:
        """U and V (D x r, r fixed) are each a read-out (y U sums D coordinates) in one product
        and an input map (r -> D) in the other: low_rank_factor gives each half of a hidden
        matrix's scaling (init and lr x m^-1/2), so UV^T + VU^T moves like a hidden D x D matrix."""
        return {**super().parameter_classes(), "u": "low_rank_factor", "v": "low_rank_factor"}

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        u, v = self.u.to(y.dtype), self.v.to(y.dtype)
        if u.dim() == 2:
            low = (y @ v) @ u.T + (y @ u) @ v.T
        else:  # y (..., K, D), u/v (K, D, R)
            low = torch.einsum("...kr,kdr->...kd", torch.einsum("...kd,kdr->...kr", y, v), u)
            low = low + torch.einsum("...kr,kdr->...kd", torch.einsum("...kd,kdr->...kr", y, u), v)
        return super().apply(y) + low

    def fold(self, w: torch.Tensor) -> torch.Tensor:
        # w P = w diag + (w V) U^T + (w U) V^T; w: (N, D) or (K, N, D)
        u, v = self.u.to(w.dtype), self.v.to(w.dtype)
        return super().fold(w) + (w @ v) @ u.transpose(-1, -2) + (w @ u) @ v.transpose(-1, -2)
