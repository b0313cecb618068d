"""Parameters by component and forward FLOPs per token counted per module.

FLOPs follow each module's `flops_per_token(seq_len)`: recursion steps are counted T
times and plain reuse `repeats` times, because tied weights are used more than once
(6·N understates CEM compute). Attention scores use the causal average context
(J+1)/2. Backward FLOPs are 2x the forward count of what is differentiated: a module
with `backward_flops_per_token(seq_len)` says so itself (CEM sublayers with
`backprop_steps: k < T` run the first T - k steps forward only, docs/design/layers.md#s2-cem-attention); training
FLOPs per token are forward + backward (3x forward when every step is differentiated).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from cem_ablate.model.blocks import RMSNorm
from cem_ablate.model.protocol import backward_flops_per_token
from cem_ablate.model.transformer import CEMTransformer


@dataclass
class ModelReport:
    params_total: int
    params_by_component: dict[str, int]
    flops_per_token: float  # forward
    flops_by_module: dict[str, float] = field(default_factory=dict)
    seq_len: int = 0
    backward_flops_per_token: float | None = None  # None: 2x forward

    @property
    def train_flops_per_token(self) -> float:
        backward = self.backward_flops_per_token
        return self.flops_per_token + (2.0 * self.flops_per_token if backward is None else backward)

    def to_dict(self) -> dict:
        return asdict(self) | {"train_flops_per_token": self.train_flops_per_token}

    def format(self) -> str:
        lines = [f"parameters: {self.params_total:,}"]
        lines += [f"  {k:<10} {v:>14,}" for k, v in self.params_by_component.items()]
        lines.append(f"forward FLOPs/token (seq {self.seq_len}): {self.flops_per_token:,.0f}")
        return "\n".join(lines)


def _component_of(name: str, module_path: list[str]) -> str:
    if name.startswith("embed_tokens"):
        return "embedding"
    if name.startswith("lm_head"):
        return "head"
    if name.endswith(
        "stream_logit"
    ):  # the velocity stream's momenta (docs/design/energy-lens.md#s11-2-velocity-stream)
        return "stream"
    if "attention" in module_path:
        return "attention"
    if "mlp" in module_path:
        return "mlp"
    return "other"


def model_report(model: CEMTransformer, seq_len: int) -> ModelReport:
    norm_params = {id(p) for m in model.modules() if isinstance(m, RMSNorm) for p in m.parameters()}
    by_component = {"embedding": 0, "attention": 0, "mlp": 0, "norms": 0, "head": 0}
    seen = set()
    for name, param in model.named_parameters():
        if id(param) in seen:
            continue
        seen.add(id(param))
        key = "norms" if id(param) in norm_params else _component_of(name, name.split("."))
        by_component[key] = by_component.get(key, 0) + param.numel()

    flops: dict[str, float] = {}
    backward = 0.0
    for i, block in enumerate(model.blocks):
        for kind, module, repeats in (
            ("attention", block.attention, block.attention_repeats),
            ("mlp", block.mlp, block.mlp_repeats),
        ):
            flops[f"blocks.{i}.{kind}"] = repeats * module.flops_per_token(seq_len)
            backward += repeats * backward_flops_per_token(module, seq_len)
        stream = (
            block.stream_flops_per_token()
        )  # velocity updates (docs/design/energy-lens.md#s11-2-velocity-stream); 0 on the residual stream
        if stream:
            flops[f"blocks.{i}.stream"] = stream
            backward += 2.0 * stream
    flops["lm_head"] = 2.0 * model.lm_head.in_features * model.lm_head.out_features
    backward += 2.0 * flops["lm_head"]
    return ModelReport(
        params_total=sum(by_component.values()),
        params_by_component={k: v for k, v in by_component.items() if v or k != "other"},
        flops_per_token=float(sum(flops.values())),
        flops_by_module=flops,
        seq_len=seq_len,
        backward_flops_per_token=backward,
    )
