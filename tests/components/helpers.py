"""Building single sublayers for component tests, with non-trivial parameters."""

from __future__ import annotations

import torch

from cem_ablate import build_model


def build_sublayer(kind: str, sub_cfg: dict, d_model=24, n_heads=3, d_mlp=40, seed=0):
    """One block's sublayer in float64, with every parameter randomized (so that
    zero-initialized parts such as KQ diagonals, self biases and low-rank V matter)."""
    torch.manual_seed(seed)
    cfg = {"d_model": d_model, "n_layers": 1, "n_heads": n_heads, "d_mlp": d_mlp, "vocab_size": 11, kind: sub_cfg}
    model = build_model(cfg).double()
    layer = getattr(model.blocks[0], kind)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.3)
    return layer


def random_stream(batch=2, seq=7, d_model=24, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seq, d_model, generator=g, dtype=torch.float64)
