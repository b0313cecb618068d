"""ALiBi relative-position bias with a learnable per-head self-token bias (docs/design/layers.md#s2-cem-attention).

    b_ijk = -m_k (i - j) + beta_k [i = j],   m_k = 2^(-8k/K), k = 1..K,   j <= i

CEM attention uses ALiBi instead of RoPE: RoPE would make the values
query-dependent and break the energy view (paper, Appendix A).
"""

from __future__ import annotations

import torch
from torch import nn


def alibi_slopes(
    n_heads: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> torch.Tensor:
    """m_k = 2^(-8k/K), k = 1..K (docs/design/layers.md#s2-cem-attention), built on `device` by arange arithmetic:
    no host tensor copied to the GPU on every forward (a copy that synchronizes
    host and device), and no cache to hold. Computed in float64, then cast: a float32 computation would
    cost float64 models 1e-8 of accuracy (on the CPU the values are those of the former
    host computation, bit for bit)."""
    k = torch.arange(1, n_heads + 1, dtype=torch.float64, device=device)
    return torch.pow(2.0, -8.0 * k / n_heads).to(dtype)


class ALiBi(nn.Module):
    """Produces the causal (K, J, J) float bias; masked entries are -inf.

    The self-token bias beta (K,) is a parameter of the attention layer that owns it
    (docs/design/contract.md#s10-public-contract names it `self_bias` there); it is passed in.
    """

    def __init__(self, n_heads: int):
        super().__init__()
        self.n_heads = n_heads

    def forward(self, seq_len: int, self_bias: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        pos = torch.arange(seq_len, device=device)
        dist = (pos[:, None] - pos[None, :]).to(dtype)  # i - j
        slopes = alibi_slopes(self.n_heads, dtype, device)
        bias = -slopes[:, None, None] * dist
        eye = torch.eye(seq_len, dtype=dtype, device=device)
        bias = bias + self_bias.to(dtype)[:, None, None] * eye
        return bias.masked_fill(dist < 0, float("-inf"))


def alibi_rows(
    n_heads: int, self_bias: torch.Tensor, first: int, rows: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """Rows first..first+rows-1 of the causal (K, J, J) bias of `ALiBi` with J = first + rows:
    the bias of `rows` new query positions against every key so far, (K, rows, J), for
    incremental decoding (the same values as slicing ALiBi's full bias)."""
    total = first + rows
    dist = (torch.arange(first, total, device=device)[:, None] - torch.arange(total, device=device)[None, :]).to(dtype)
    bias = -alibi_slopes(n_heads, dtype, device)[:, None, None] * dist
    bias = bias + self_bias.to(dtype)[:, None, None] * (dist == 0).to(dtype)
    return bias.masked_fill(dist < 0, float("-inf"))
