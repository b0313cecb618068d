"""Decoder-only Transformer assembled from registered sublayers (docs/design/layers.md#s1-llama-baseline, docs/design/contract.md#s10-public-contract, docs/design/energy-lens.md#s11-energy-lens).

    h = embed(ids); for each block: h = attention(h) [x repeats]; h = mlp(h) [x repeats]
    logits = lm_head(norm(h))

Sublayers own their norm and residual (CEM absorbs the residual into its recursion),
so a block is just the two of them in order. Under `depth_mode: reuse` the block
applies a sublayer `repeats` times with the same weights (docs/design/layers.md#s5-plain-layer-reuse).

Two model options change how a block uses its sublayers (docs/design/energy-lens.md#s11-energy-lens):
- `stream: heavy_ball | nesterov` (docs/design/energy-lens.md#s11-2-velocity-stream) carries a velocity v across depth: each
  sublayer application f contributes its increment F(y) = f(y) - y to v, and x moves by
  v. A block then maps (x, v) to (x, v); `stream: residual` (the default) builds
  exactly the block above, with no extra parameters.
- `block: parallel` (docs/design/energy-lens.md#s11-3-energy-transformer-block) replaces "attention, then MLP" by T joint steps on the sum
  of both energies at one normalized state (`ParallelBlock`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import nn

from cem_ablate.config.dims import ModelDims
from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.model.parametrization import mup_parameter_groups
from cem_ablate.model.protocol import Sublayer, decode, decode_context, tracks_energy

StreamStep = tuple[int, Callable[[torch.Tensor], torch.Tensor]]


class Block(nn.Module):
    """Attention then MLP, each applied `repeats` times, on the residual or velocity stream.

    With `stream` other than residual the block owns, per sublayer l (attention, MLP),
    the momentum logit a_l (`stream_logit`, mu_l = sigmoid(a_l), init
    logit(stream_momentum)) and, with `velocity_norm: rms`, an RMSNorm of v
    (`velocity_norm[l]`). docs/design/energy-lens.md#s11-2-velocity-stream indexes mu by sublayer, so under plain reuse every
    application of a sublayer is one stream update with that sublayer's mu_l and norm.
    """

    def __init__(
        self,
        attention: Sublayer,
        mlp: Sublayer,
        attention_repeats: int = 1,
        mlp_repeats: int = 1,
        *,
        stream: str = "residual",
        stream_momentum: float = 0.5,
        velocity_norm: str = "none",
        dims: ModelDims | None = None,
    ):
        super().__init__()
        # A plugin's modules: the hooks a block calls on them (norm, step_context, direction,
        # decode...) are checked where the model is assembled (model/assembly.py, protocol.py).
        self.attention: Any = attention
        self.mlp: Any = mlp
        self.attention_repeats = attention_repeats
        self.mlp_repeats = mlp_repeats
        self.stream = stream
        self.d_model = dims.d_model if dims is not None else None
        if stream != "residual":  # residual: today's block, no stream parameters at all
            n = self.n_stream_sublayers
            logit = math.log(stream_momentum / (1.0 - stream_momentum))
            self.stream_logit = nn.Parameter(torch.full((n,), logit))
            if velocity_norm == "rms":
                if dims is None:
                    raise ValueError("velocity_norm: rms needs the model's dims (its width and norm epsilon)")
                self.velocity_norm = nn.ModuleList(RMSNorm(dims.d_model, dims.norm_eps) for _ in range(n))

    @property
    def n_stream_sublayers(self) -> int:
        """The sublayers l that own a stream momentum mu_l (docs/design/energy-lens.md#s11-2-velocity-stream: attention, MLP)."""
        return 2

    def stream_steps(self) -> list[StreamStep]:
        """The sublayer applications in order, each with its stream index l."""
        steps: list[StreamStep] = [(0, self.attention)] * self.attention_repeats + [(1, self.mlp)] * self.mlp_repeats
        return steps

    def forward(self, x: torch.Tensor, v: torch.Tensor | None = None):
        """x -> x on the residual stream; (x, v) -> (x, v) on a velocity stream
        (v = None: zero velocity, the state after the embedding)."""
        return self.run_stream(self.stream_steps(), x, v)

    def decode(self, x: torch.Tensor, v: torch.Tensor | None, states: dict, position: int):
        """`forward` for the new tokens at `position`.. of a sequence being decoded
        (model/decoding.py): each sublayer application runs its decoding hook with its
        own entry of `states` (this block's part of the cache), updated in place."""
        return self.run_stream(self.decode_steps(states, position), x, v)

    def decode_steps(self, states: dict, position: int) -> list[StreamStep]:
        """`stream_steps` with each application decoding through its own cache entry:
        'attention.r' / 'mlp.r' for the r-th application (depth_mode: reuse applies a
        sublayer `repeats` times, each on its own input, so each keeps its own state)."""
        out: list[StreamStep] = []
        seen: dict[int, int] = {}
        for index, f in self.stream_steps():
            name = f"{('attention', 'mlp')[index]}.{seen.setdefault(index, 0)}"
            seen[index] += 1
            out.append((index, functools.partial(_decode_application, f, states, name, position)))
        return out

    def run_stream(self, steps: list[StreamStep], x: torch.Tensor, v: torch.Tensor | None = None):
        """The sublayer applications `steps` in order, on the block's stream."""
        if self.stream == "residual":
            for _, f in steps:
                x = f(x)
            return x
        if v is None:
            v = torch.zeros_like(x)
        mu = torch.sigmoid(self.stream_logit)
        norms = getattr(self, "velocity_norm", None)
        for index, f in steps:
            # docs/design/energy-lens.md#s11-2-velocity-stream: nesterov evaluates the sublayer at the look-ahead y = x + mu v.
            y = x + mu[index] * v if self.stream == "nesterov" else x
            v = mu[index] * v + (f(y) - y)
            if norms is not None:
                v = norms[index](v)
            x = x + v
        return x, v

    def stream_flops_per_token(self) -> float:
        """Element-wise forward FLOPs of the velocity updates (0 on the residual stream):
        F = f(y) - y, mu v, v + F, x + v (4 D); nesterov's y = x + mu v reuses mu v (1 D);
        a velocity RMSNorm about 4 D."""
        if self.stream == "residual":
            return 0.0
        d = self.d_model
        assert d is not None  # a velocity stream is built with the model's dims
        per_update = 4 * d + (d if self.stream == "nesterov" else 0) + (4 * d if hasattr(self, "velocity_norm") else 0)
        return float(per_update * len(self.stream_steps()))


def _decode_application(sublayer: Any, states: dict, name: str, position: int, h: torch.Tensor) -> torch.Tensor:
    h, states[name] = decode(sublayer, h, states.get(name), position)
    return h


class ParallelBlock(Block):
    """The Energy Transformer's joint step, causal (docs/design/energy-lens.md#s11-3-energy-transformer-block, `block: parallel`):

        c = RMSNorm(h) (the attention's norm; the MLP's own norm is removed)
        x^0 = h ;  u^t = c if t = 0 else RMSNorm(x^t)
        x^{t+1} = x^t + eta_att Delta_att(u^t) + eta_mlp Delta_mlp(u^t),  t = 0..T-1 ;  output x^T

    Keys/values and gamma come once from c (`step_context`), as in the sequential
    recursion. With Llama sublayers and T = 1 this is the PaLM/GPT-J parallel block
    x + Attn(c) + MLP(c). On a velocity stream the joint step is one sublayer f
    (x^T = f(h)), so the block owns one stream momentum and one velocity norm.
    The energy trace records attention + MLP energy at each query state u^t and after
    the last step (`blocks.i/step t`), as a CEM sublayer records its own.
    """

    def __init__(self, attention: Sublayer, mlp: Sublayer, steps: int = 1, **stream_options: Any):
        # The MLP's norm is not used by the joint step: drop it before the parameters are
        # counted or registered with an optimizer (docs/design/energy-lens.md#s11-3-energy-transformer-block: one RMSNorm per block).
        module = cast(nn.Module, mlp)  # every built sublayer is an nn.Module (protocol.Sublayer)
        if "norm" in module._modules:
            del module.norm
        super().__init__(attention, mlp, **stream_options)
        self.steps = steps
        self.energy_trace: list[float] = []
        if tracks_energy(attention) and tracks_energy(mlp):
            self.track_energy = False  # only blocks of two energy sublayers join the trace (not Llama)

    @property
    def norm(self) -> nn.Module:
        norm: nn.Module = self.attention.norm
        return norm

    @property
    def n_stream_sublayers(self) -> int:
        return 1

    def stream_steps(self) -> list[StreamStep]:
        return [(0, self.joint_step)]

    def decode_steps(self, states: dict, position: int) -> list[StreamStep]:
        return [(0, functools.partial(self.joint_step_decode, states=states, position=position))]

    def joint_step(self, h: torch.Tensor) -> torch.Tensor:
        c = self.norm(h)
        ctx_att = self.attention.step_context(c)
        ctx_mlp = self.mlp.step_context(c)
        return self.joint_steps(h, c, ctx_att, ctx_mlp, getattr(self, "track_energy", False))

    def joint_step_decode(self, h: torch.Tensor, states: dict, position: int) -> torch.Tensor:
        """`joint_step` for new tokens: the contexts from the sublayers' `decode_context`
        (keys of the earlier tokens from the cache); no energy trace."""
        c = self.norm(h)
        ctx_att, states["attention"] = decode_context(self.attention, c, states.get("attention"), position)
        ctx_mlp, states["mlp"] = decode_context(self.mlp, c, states.get("mlp"), position)
        return self.joint_steps(h, c, ctx_att, ctx_mlp, tracking=False)

    def joint_steps(self, h: torch.Tensor, c: torch.Tensor, ctx_att, ctx_mlp, tracking: bool) -> torch.Tensor:
        """The T joint steps from x^0 = h (docs/design/energy-lens.md#s11-3-energy-transformer-block)."""
        if tracking:
            self.energy_trace = []
        x = h
        for t in range(self.steps):
            u = c if t == 0 else self.norm(x)
            if tracking:
                self._record(u, ctx_att, ctx_mlp)
            x = x + self.attention.direction(u, ctx_att) + self.mlp.direction(u, ctx_mlp)
        if tracking:
            self._record(self.norm(x), ctx_att, ctx_mlp)
        return x

    @torch.no_grad()
    def _record(self, u: torch.Tensor, ctx_att, ctx_mlp) -> None:
        self.energy_trace.append(float(self.block_energy(u, ctx_att, ctx_mlp).mean()))

    def block_energy(self, u: torch.Tensor, ctx_att, ctx_mlp) -> torch.Tensor:
        return self.attention.step_energy(u, ctx_att) + self.mlp.step_energy(u, ctx_mlp)

    def energy(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Attention + MLP energy of query state x given block input h: shape (B,)."""
        c = self.norm(h)
        return self.block_energy(x, self.attention.step_context(c), self.mlp.step_context(c))


class CEMTransformer(nn.Module):
    def __init__(self, dims: ModelDims, blocks: list[Block], config: Any = None):
        super().__init__()
        self.dims = dims
        self.config = config  # the validated ModelConfig it was built from
        self.embed_tokens = nn.Embedding(dims.vocab_size, dims.d_model)
        nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=dims.init_std)
        # An nn.ModuleList of Blocks (torch types a ModuleList's items as Module only).
        self.blocks = cast(Sequence[Block], nn.ModuleList(blocks))
        self.norm = RMSNorm(dims.d_model, dims.norm_eps)
        self.lm_head = linear(dims.d_model, dims.vocab_size, dims.init_std * dims.readout_init_scale)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(self.hidden_states(input_ids)))

    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.run_blocks(self.embed_tokens(input_ids))

    def run_blocks(self, h: torch.Tensor, blocks=None) -> torch.Tensor:
        """The stream x after `blocks` (default: the model's own; the bench passes compiled
        ones). On a velocity stream (docs/design/energy-lens.md#s11-2-velocity-stream) v starts at 0 after the embedding and the
        final norm reads x."""
        blocks = self.blocks if blocks is None else blocks
        if self.blocks[0].stream == "residual":
            for block in blocks:
                h = block(h)
            return h
        v = None
        for block in blocks:
            h, v = block(h, v)
        return h

    def parameter_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups (docs/design/experiments.md#s7-training-recipe): decay matrices and embeddings only.

        Norm gains, KQ diagonals, preconditioner parameters, ALiBi self biases and
        step sizes are not decayed. Matrices are the weights of nn.Linear and
        nn.Embedding modules; everything else is a vector-like parameter.
        """
        decay_ids = {id(m.weight) for m in self.modules() if isinstance(m, (nn.Linear, nn.Embedding))}
        if self.dims.parametrization == "mup":  # the same decay rule, groups per muP class
            return mup_parameter_groups(self, self.dims, weight_decay, decay_ids)
        decay = [p for p in self.parameters() if id(p) in decay_ids]
        no_decay = [p for p in self.parameters() if id(p) not in decay_ids]
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    # -- energy tracking (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp: do the recursion steps descend?) ----------------
    def cem_sublayers(self) -> dict[str, Any]:
        """The sublayers that record their energy per step (protocol.EnergyTracking)."""
        return {name: m for name, m in self.named_modules() if tracks_energy(m)}

    def set_energy_tracking(self, enabled: bool) -> None:
        for module in self.cem_sublayers().values():
            module.track_energy = enabled
            module.energy_trace = []

    def energy_trace(self) -> dict[str, float]:
        """{'blocks.0.attention/step0': E, ...} from the last forward pass."""
        out: dict[str, float] = {}
        for name, module in self.cem_sublayers().items():
            for step, value in enumerate(module.energy_trace):
                out[f"{name}/step{step}"] = value
        return out
