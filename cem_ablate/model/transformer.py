"""Decoder-only Transformer assembled from registered sublayers (SPEC §1, §10).

    h = embed(ids); for each block: h = attention(h) [x repeats]; h = mlp(h) [x repeats]
    logits = lm_head(norm(h))

Sublayers own their norm and residual (CEM absorbs the residual into its recursion),
so a block is just the two of them in order. Under `depth_mode: reuse` the block
applies a sublayer `repeats` times with the same weights (SPEC §5).
"""

from __future__ import annotations

import torch
from torch import nn

from cem_ablate.config.dims import ModelDims
from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.model.protocol import tracks_energy


class Block(nn.Module):
    def __init__(self, attention: nn.Module, mlp: nn.Module, attention_repeats: int = 1, mlp_repeats: int = 1):
        super().__init__()
        self.attention = attention
        self.mlp = mlp
        self.attention_repeats = attention_repeats
        self.mlp_repeats = mlp_repeats

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for _ in range(self.attention_repeats):
            h = self.attention(h)
        for _ in range(self.mlp_repeats):
            h = self.mlp(h)
        return h


class CEMTransformer(nn.Module):
    def __init__(self, dims: ModelDims, blocks: list[Block], config=None):
        super().__init__()
        self.dims = dims
        self.config = config  # the validated ModelConfig it was built from
        self.embed_tokens = nn.Embedding(dims.vocab_size, dims.d_model)
        nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=dims.init_std)
        self.blocks = nn.ModuleList(blocks)
        self.norm = RMSNorm(dims.d_model, dims.norm_eps)
        self.lm_head = linear(dims.d_model, dims.vocab_size, dims.init_std)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(self.hidden_states(input_ids)))

    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(input_ids)
        for block in self.blocks:
            h = block(h)
        return h

    def parameter_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups (SPEC §7): decay matrices and embeddings only.

        Norm gains, KQ diagonals, preconditioner parameters, ALiBi self biases and
        step sizes are not decayed. Matrices are the weights of nn.Linear and
        nn.Embedding modules; everything else is a vector-like parameter.
        """
        decay_ids = {
            id(m.weight) for m in self.modules() if isinstance(m, (nn.Linear, nn.Embedding))
        }
        decay = [p for p in self.parameters() if id(p) in decay_ids]
        no_decay = [p for p in self.parameters() if id(p) not in decay_ids]
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    # -- energy tracking (SPEC §2-§3: do the recursion steps descend?) ----------------
    def cem_sublayers(self) -> dict[str, nn.Module]:
        """The sublayers that record their energy per step (protocol.EnergyTracking)."""
        return {name: m for name, m in self.named_modules() if tracks_energy(m)}

    def set_energy_tracking(self, enabled: bool) -> None:
        for module in self.cem_sublayers().values():
            module.track_energy = enabled
            module.energy_trace = []

    def energy_trace(self) -> dict[str, float]:
        """{'blocks.0.attention/step0': E, ...} from the last forward pass."""
        out = {}
        for name, module in self.cem_sublayers().items():
            for step, value in enumerate(module.energy_trace):
                out[f"{name}/step{step}"] = value
        return out
