"""`model.parametrization`: which class each parameter belongs to, and what mup does to it.

One owner for the muP rules (Tensor Programs V, "µP for Adam"): every parameter of a built
model has a class; under `parametrization: mup` the class fixes its init and its Adam
learning-rate multiplier as a power of the width multiplier m = d_model / base_d_model, so
that the optimal learning rate found at a proxy width holds at the target width. At the base
width (m = 1) every multiplier is 1 and the model is the standard one (with the default
`model.mup_readout: scaled`; `zero` zero-inits the readout at every width).

Why `scaled` is the default readout (measured: docs/results/readout.md): `zero` makes the test perplexity of this platform's short recipe much worse at the
base width, where it is the only difference from the standard model, and leaves lr* unidentified
(the seeds' intervals span the grid). `scaled` (muP's 1/fan_in^2 variance) trains as the
standard model at the base width and holds lr* within a small factor across width. Its initial
logits shrink as m^-1/2 (the random part of the readout vanishing, as muP prescribes), so the
coordinate check reads the logits' slope as -1/2 at init and within the bound once trained;
`zero` passes that check at every step. Under `standard` nothing here touches the model:
outputs and trial keys are the paper's.

    class              init (standard init x)   Adam lr x   why
    embedding          1                        1           input weights: a one-hot fan-in, Θ(1) coordinates
    hidden             m^-1/2                   m^-1        both dims grow with width (var ∝ 1/fan_in, lr ∝ 1/fan_in)
    readout            m^-1, or 0               m^-1        logits = W x sums D correlated terms: lr ∝ 1/D; the
                       (model.mup_readout:                  init var ∝ 1/fan_in^2 keeps the backward signal W^T g
                        scaled | zero)                      Θ(1/D) like the update's (zero: that variance's limit)
    vector             1                        1           at most one dim grows: gains, KQ diagonals, self biases,
                                                            step sizes, momentum and stream logits
    low_rank_factor    m^-1/2                   m^-1/2      the D x r factors U, V of P = diag + UV^T + VU^T (r fixed)
    sqrt_width_vector  1                        m^-1/2      the preconditioner diagonal p, used as softplus(sqrt(D) p)

Decisions for the energy-derived layers (measured in docs/results/transfer.md):
- Tied W_Q / W_K of CEM attention, used as W (queries, keys = values) and as W^T (the
  read-out W_Q^T o): square D x D, so fan-in and fan-out are both D in either use; one
  class, `hidden`, is right for both uses.
- The CEM MLP's V (SiLU branch and its transpose read-out) and W, the Hopfield MLP's Xi:
  D_m x D with D_m ∝ D, used as V and V^T: both dims grow, `hidden` for both uses.
- The preconditioner's D x r factors (r fixed): each factor is a read-out (y U contracts the D
  coordinates) in one product and an input map (expands r to D) in the other (UV^T + VU^T), so
  neither the readout nor the input rule fits both uses. Their product is a D x D matrix whose
  update must be Θ(1/D) per entry (a hidden matrix's): with init and lr both ∝ m^-1/2 per factor,
  ΔU V^T + U ΔV^T is ∝ m^-1/2 · m^-1/2 = m^-1 per entry, exactly the hidden class's.
- The preconditioner diagonal is softplus(sqrt(D) p) (docs/design/layers.md#s4-preconditioners): Adam moves p by ~lr a step, so the
  entry moves by sqrt(D)·lr; lr ∝ m^-1/2 keeps that Θ(1). p's init 1/sqrt(D) already makes the
  initial entry softplus(1) at every width.
- The KQ-diagonal term c·(δ⊙x) sums D coordinates: δ is a vector (lr unscaled) and the muP
  attention temperature tau ∝ d_head (`ModelDims.attention_temperature`) keeps the sum Θ(1).
- The recursion step size eta over T steps: `step_scaling: inverse_steps` divides eta by T
  (the 1/N residual scale of weight-tied loops); which keeps lr* fixed across T is measured
  (docs/results/transfer.md).

Weight decay is decoupled from the lr multiplier: AdamW decays by lr·wd, so a group whose lr
is scaled by k gets wd / k, and the decay per step is the same at every width.

A component may declare its parameters' classes (`protocol.ParameterClasses`); what it does not
declare is inferred from shapes: a parameter with two or more dims of size >= d_model is
`hidden`, anything else `vector`. `cem-ablate components` states both.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import torch
from torch import nn

from cem_ablate.config.dims import ModelDims
from cem_ablate.model import protocol
from cem_ablate.model.blocks import RMSNorm


class ParamClass(str, enum.Enum):
    EMBEDDING = "embedding"
    HIDDEN = "hidden"
    READOUT = "readout"
    VECTOR = "vector"
    LOW_RANK_FACTOR = "low_rank_factor"
    SQRT_WIDTH_VECTOR = "sqrt_width_vector"


# class -> (exponent of m in the init multiplier, or None for zero init; exponent of m in the lr multiplier)
MUP_RULES: dict[ParamClass, tuple[float | None, float]] = {
    ParamClass.EMBEDDING: (0.0, 0.0),
    ParamClass.HIDDEN: (-0.5, -1.0),
    ParamClass.READOUT: (-1.0, -1.0),  # mup_readout: scaled; `zero` replaces the init (init_exponent)
    ParamClass.VECTOR: (0.0, 0.0),
    ParamClass.LOW_RANK_FACTOR: (-0.5, -0.5),
    ParamClass.SQRT_WIDTH_VECTOR: (0.0, -0.5),
}

DESCRIPTIONS: dict[ParamClass, str] = {
    ParamClass.EMBEDDING: "input weights: init x1, lr x1",
    ParamClass.HIDDEN: "both dims grow with width: init x m^-1/2, lr x m^-1",
    ParamClass.READOUT: "the LM head: init x m^-1 (or zero: model.mup_readout), lr x m^-1",
    ParamClass.VECTOR: "at most one dim grows: init x1, lr x1",
    ParamClass.LOW_RANK_FACTOR: "a D x r factor of a D x D product: init x m^-1/2, lr x m^-1/2",
    ParamClass.SQRT_WIDTH_VECTOR: "a vector used through a sqrt(D) multiplier: init x1, lr x m^-1/2",
}


def parse_class(value: str, where: str) -> ParamClass:
    try:
        return ParamClass(value)
    except ValueError:
        raise ValueError(
            f"{where}: unknown parameter class {value!r} (classes: {', '.join(c.value for c in ParamClass)})"
        ) from None


def inferred_class(shape: torch.Size, d_model: int) -> ParamClass:
    """The default for an undeclared parameter: hidden when two or more dims are width-sized."""
    return ParamClass.HIDDEN if sum(size >= d_model for size in shape) >= 2 else ParamClass.VECTOR


def declared_classes(model: nn.Module) -> dict[str, tuple[ParamClass, str]]:
    """{parameter name: (class, module that declared it)} from every module's hook; a deeper
    module's declaration wins (named_modules lists parents first)."""
    out: dict[str, tuple[ParamClass, str]] = {}
    for prefix, module in model.named_modules():
        for rel, value in protocol.declared_parameter_classes(module).items():
            name = f"{prefix}.{rel}" if prefix else rel
            out[name] = (
                parse_class(value, f"{type(module).__name__}.parameter_classes()[{rel!r}]"),
                type(module).__name__,
            )
    return out


def classify(model: nn.Module, d_model: int) -> dict[str, tuple[ParamClass, str]]:
    """{parameter name: (class, source)} for every parameter; source says where the class came
    from: the core (embedding, readout, norms), a component's declaration, or 'inferred'."""
    declared = declared_classes(model)
    norm_weights = {
        f"{name}.weight" if name else "weight" for name, m in model.named_modules() if isinstance(m, RMSNorm)
    }
    out: dict[str, tuple[ParamClass, str]] = {}
    for name, p in model.named_parameters():
        if name == "embed_tokens.weight":
            out[name] = (ParamClass.EMBEDDING, "core")
        elif name == "lm_head.weight":
            out[name] = (ParamClass.READOUT, "core")
        elif name in declared:
            out[name] = declared[name]
        elif name in norm_weights:
            out[name] = (ParamClass.VECTOR, "core")
        else:
            out[name] = (inferred_class(p.shape, d_model), "inferred")
    return out


def lr_multiplier(cls: ParamClass, m: float) -> float:
    return m ** MUP_RULES[cls][1]


def init_exponent(cls: ParamClass, dims: ModelDims) -> float | None:
    """The exponent of m that multiplies the class's standard init (None: zero init); the
    readout's depends on `model.mup_readout`."""
    if cls is ParamClass.READOUT and dims.mup_readout == "zero":
        return None
    return MUP_RULES[cls][0]


@torch.no_grad()
def apply_mup_init(model: nn.Module, dims: ModelDims) -> None:
    """Rescale the standard init of every parameter by its class's rule (mup only)."""
    m = dims.width_multiplier
    params = dict(model.named_parameters())
    for name, (cls, _) in classify(model, dims.d_model).items():
        exponent = init_exponent(cls, dims)
        if exponent is None:
            params[name].zero_()
        elif exponent != 0.0:
            params[name].mul_(m**exponent)


def mup_parameter_groups(model: nn.Module, dims: ModelDims, weight_decay: float, decayed: set[int]) -> list[dict]:
    """AdamW groups, one per (class, decayed): each with `lr_multiplier` (read by
    training.optimizer.build_adamw) and its weight decay divided by that multiplier (decoupled:
    the decay per step, lr·wd, is the same at every width)."""
    m = dims.width_multiplier
    groups: dict[tuple[ParamClass, bool], list[nn.Parameter]] = {}
    params = dict(model.named_parameters())
    for name, (cls, _) in classify(model, dims.d_model).items():
        groups.setdefault((cls, id(params[name]) in decayed), []).append(params[name])
    out = []
    for (cls, decay), ps in groups.items():
        mult = lr_multiplier(cls, m)
        out.append(
            {
                "params": ps,
                "lr_multiplier": mult,
                "param_class": cls.value,
                "weight_decay": weight_decay / mult if decay else 0.0,
            }
        )
    return out


def describe(model: nn.Module, d_model: int) -> Iterator[str]:
    """One line per parameter: name, shape, class and where the class came from."""
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    for name, (cls, source) in classify(model, d_model).items():
        yield f"{name:<32} {str(shapes[name]):<16} {cls.value:<18} ({source})"


PROBE_DIMS = ModelDims(d_model=64, n_layers=1, n_heads=4, d_mlp=176, vocab_size=256, max_seq_len=16)


def format_parameter_classes() -> str:
    """`cem-ablate components`: the muP class of every parameter of every attention, MLP and
    preconditioner component at its default options (built at d_model 64), and where the class
    came from (its declaration, or inferred from the shape)."""
    from cem_ablate import registry

    lines = ["parameter classes under parametrization: mup (built at d_model 64, default options):"]
    lines += [f"  {cls.value:<18} {DESCRIPTIONS[cls]}" for cls in ParamClass]
    for spec in registry.all_specs():
        if spec.kind not in (*protocol.SUBLAYER_KINDS, "preconditioner") or not isinstance(spec.factory, type):
            continue
        try:
            if spec.kind == "preconditioner":
                module = spec.factory(dim=PROBE_DIMS.d_model, heads=None, rank=4)
            else:
                module = spec.factory(PROBE_DIMS, spec.options() if spec.options else None, 1)
            rows = list(describe(module, PROBE_DIMS.d_model))
        except Exception as err:  # noqa: BLE001  a plugin that cannot be probed costs only its own lines, which say why
            rows = [f"(not built at d_model 64: {type(err).__name__}: {err})"]
        lines.append(f"  {spec.kind} {spec.name}:")
        lines += [f"      {row}" for row in rows] or ["      (no parameters)"]
    return "\n".join(lines)
