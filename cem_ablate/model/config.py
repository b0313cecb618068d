"""The `model:` section: size presets, sublayer choices, validated once (docs/design/contract.md#s10-public-contract).

A sublayer mapping holds three generic keys, `name`, `steps` and `depth_mode`, and
the options of the chosen component (its registered options dataclass):

    attention: {name: cem, steps: 2, depth_mode: recursion,
                preconditioner: {name: diag_lowrank, rank: 4}, kq_diag: shared}

`depth_mode: recursion` runs T steps inside the component (context, keys/values and
gamma fixed; docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp); `depth_mode: reuse` applies the whole sublayer T times with
the same weights (docs/design/layers.md#s5-plain-layer-reuse). Every problem raises `ConfigError` naming the key path
before any module is built.

Model-wide options of the energy-lens family (docs/design/energy-lens.md#s11-2-velocity-stream to docs/design/energy-lens.md#s11-3-energy-transformer-block; the defaults are the
model of docs/design/layers.md#s1-llama-baseline to docs/design/layers.md#s5-plain-layer-reuse, unchanged): `stream` carries a velocity across the sublayers,
`block: parallel` takes one joint step on the attention and MLP energies per block.
Their one description, with the defaults of `ModelOptions`, is `MODEL_OPTIONS`
(listed by `cem-ablate components`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cem_ablate import registry
from cem_ablate.config.dims import ModelDims
from cem_ablate.config.errors import ConfigError, unknown
from cem_ablate.config.schema import join, parse, require, to_dict
from cem_ablate.model import protocol

# name -> (d_model, n_layers, n_heads, d_mlp). The paper's sizes are its Table 1 (docs/design/layers.md#s1-llama-baseline);
# the small ones are CPU scales for smoke runs and tests.
SIZE_PRESETS: dict[str, tuple[int, int, int, int]] = {
    "86M": (672, 8, 8, 1792),
    "108M": (672, 12, 12, 1792),
    "134M": (768, 12, 12, 2048),
    "162M": (864, 12, 12, 2304),
    "tiny": (64, 2, 4, 176),
    "mini": (128, 4, 4, 344),
    "small": (256, 6, 8, 688),
}
DIM_KEYS = ("d_model", "n_layers", "n_heads", "d_mlp")  # what a size preset sets
DEFAULT_VOCAB_SIZE = 32000
GENERIC_SUBLAYER_KEYS = ("name", "steps", "depth_mode")


@dataclass(frozen=True)
class SublayerConfig:
    kind: str  # "attention" or "mlp"
    name: str
    steps: int = 1
    depth_mode: Literal["recursion", "reuse"] = "recursion"
    options: Any = None  # the component's options dataclass instance

    @property
    def spec(self) -> registry.ComponentSpec:
        return registry.get(self.kind, self.name)

    @property
    def recursion_steps(self) -> int:
        """Steps taken inside the component (1 under plain reuse)."""
        return self.steps if self.depth_mode == "recursion" else 1

    @property
    def repeats(self) -> int:
        """How often the block applies the sublayer (T under plain reuse)."""
        return self.steps if self.depth_mode == "reuse" else 1

    def to_mapping(self) -> dict[str, Any]:
        out = {"name": self.name, "steps": self.steps, "depth_mode": self.depth_mode}
        out.update(to_dict(self.options) if self.options is not None else {})
        return out


@dataclass(frozen=True)
class ModelOptions:
    """The model-wide options of docs/design/energy-lens.md#s11-2-velocity-stream to docs/design/energy-lens.md#s11-3-energy-transformer-block; the defaults are today's model."""

    stream: Literal["residual", "heavy_ball", "nesterov"] = "residual"
    stream_momentum: float = 0.5  # mu_l = sigmoid(a_l) starts at this value
    velocity_norm: Literal["none", "rms"] = "none"
    block: Literal["sequential", "parallel"] = "sequential"
    # Hyperparameter transfer (cem_ablate/model/parametrization.py): under mup every parameter
    # class gets its init and Adam learning-rate multiplier as a power of d_model / base_d_model.
    parametrization: Literal["standard", "mup"] = "standard"
    base_d_model: int = 256  # the width at which mup coincides with standard (ignored under standard)
    step_scaling: Literal["none", "inverse_steps"] = "none"  # inverse_steps: eta / T in every recursion
    # The readout's init under mup (parametrization.py): the standard init x m^-1 (muP's
    # 1/fan_in^2 variance; the standard model at the base width), or zero, which costs test
    # perplexity at the base width and leaves lr* unidentified (measured: docs/results/readout.md).
    mup_readout: Literal["scaled", "zero"] = "scaled"
    # A multiplier on the LM head's init std (init_std x this; under mup the scaled readout x
    # this, a width-independent constant as mup's authors advise tuning at the base width). The
    # readout's random init is load-bearing on this platform's recipe: shrinking it costs test
    # perplexity and enlarging it gains some (measured: docs/results/readout.md).
    readout_init_scale: float = 1.0

    @property
    def has_velocity(self) -> bool:
        return self.stream != "residual"


# One line per option of ModelOptions, for `cem-ablate components` (defaults read from
# the dataclass, so the listing cannot drift from the parser).
MODEL_OPTIONS: dict[str, str] = {
    "stream": "velocity stream across depth (docs/design/energy-lens.md#s11-2-velocity-stream): residual | heavy_ball | nesterov",
    "stream_momentum": "initial mu of every sublayer's learnable stream momentum, in (0, 1)",
    "velocity_norm": "RMSNorm of the velocity after each update: none | rms",
    "block": "sequential (attention then MLP) | parallel (one joint step, docs/design/energy-lens.md#s11-3-energy-transformer-block)",
    "parametrization": "standard (the paper's) | mup (learning rates transfer across width; docs/guides/learning-rate-transfer.md)",
    "base_d_model": "under mup: the proxy width at which mup coincides with standard",
    "step_scaling": "none | inverse_steps: every recursive sublayer steps with eta / T instead of eta",
    "mup_readout": "under mup: the LM head's init, scaled (standard init x base_d_model / d_model) | zero",
    "readout_init_scale": "a multiplier (> 0) on the LM head's init std, under either parametrization",
}


def format_model_options() -> str:
    """The `model:` options with their defaults, as `cem-ablate components` lists them."""
    defaults = ModelOptions()
    lines = ["model options:"]
    for key, description in MODEL_OPTIONS.items():
        lines.append(f"  {key:<20} {description}")
        lines.append(f"      {key} = {getattr(defaults, key)!r}")
    return "\n".join(lines)


@dataclass(frozen=True)
class ModelConfig(ModelOptions):
    size: str | None = (
        None  # a size preset (SIZE_PRESETS): the paper's 86M-162M (Table 1, docs/design/layers.md#s1-llama-baseline) or tiny/mini/small
    )
    d_model: int | None = None  # residual width D (overrides the preset's)
    n_layers: int | None = None  # blocks (overrides the preset's)
    n_heads: int | None = None  # attention heads; must divide d_model (overrides the preset's)
    d_mlp: int | None = None  # MLP hidden width D_m (overrides the preset's)
    vocab_size: int | None = None  # None: 32000, or the tokenizer's size when training
    max_seq_len: int = 2048  # longest sequence the model takes (positions)
    norm_eps: float = 1e-5  # RMSNorm epsilon
    init_std: float = (
        0.02  # std of the N(0, std^2) init of every matrix (docs/design/experiments.md#s7-training-recipe)
    )
    attention: SublayerConfig = field(default_factory=lambda: SublayerConfig("attention", "llama"))
    mlp: SublayerConfig = field(default_factory=lambda: SublayerConfig("mlp", "llama"))

    @property
    def dims(self) -> ModelDims:
        preset = SIZE_PRESETS[self.size] if self.size else (None, None, None, None)
        d_model, n_layers, n_heads, d_mlp = (
            explicit if explicit is not None else default
            for explicit, default in zip((self.d_model, self.n_layers, self.n_heads, self.d_mlp), preset)
        )
        if d_model is None or n_layers is None or n_heads is None or d_mlp is None:
            raise ValueError("model: a size preset, or d_model, n_layers, n_heads and d_mlp, are required")
        return ModelDims(
            d_model=d_model,
            n_layers=n_layers,
            n_heads=n_heads,
            d_mlp=d_mlp,
            vocab_size=self.vocab_size or DEFAULT_VOCAB_SIZE,
            max_seq_len=self.max_seq_len,
            norm_eps=self.norm_eps,
            init_std=self.init_std,
            parametrization=self.parametrization,
            base_d_model=self.base_d_model,
            mup_readout=self.mup_readout,
            readout_init_scale=self.readout_init_scale,
        )

    def to_mapping(self) -> dict[str, Any]:
        # Model options at their defaults are left out: a config written before they
        # existed keeps its mapping, hence its variant and trial keys.
        defaults = ModelOptions()
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("attention", "mlp")
            and getattr(self, f.name) is not None
            and not (f.name in MODEL_OPTIONS and getattr(self, f.name) == getattr(defaults, f.name))
        }
        if self.parametrization == "standard":
            out.pop("base_d_model", None)  # no effect under standard: the same model, the same keys
            out.pop("mup_readout", None)
        out["attention"] = self.attention.to_mapping()
        out["mlp"] = self.mlp.to_mapping()
        return out

    def identity_mapping(self) -> dict[str, Any]:
        """`to_mapping` as the variant key hashes it: what is built, not how it was named.

        A size preset stands for its dims only when no dim is given beside it; with any
        dim given, the resolved d_model, n_layers, n_heads and d_mlp are hashed and the
        preset's name is not (a proxy `{d_model: 384, d_mlp: 1024}` of the 108M, 134M and
        162M presets is one 12-layer model, trained once). A bare preset keeps its name,
        so every config without overrides keeps its key (the committed reference of every
        study file's variant keys, tests/model/test_parametrization.py); dims spelled out
        without a preset are hashed as spelled, whether or not a preset has them too.
        """
        out = self.to_mapping()
        if self.size is not None and any(k in out for k in DIM_KEYS):
            dims = self.dims
            del out["size"]
            out.update({k: getattr(dims, k) for k in DIM_KEYS})
        return out


@dataclass(frozen=True)
class _ModelFields(ModelOptions):
    """The scalar keys of `model:`; sublayers are parsed through the registry."""

    size: str | None = None
    d_model: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    d_mlp: int | None = None
    vocab_size: int | None = None
    max_seq_len: int = 2048
    norm_eps: float = 1e-5
    init_std: float = 0.02
    attention: Any = None
    mlp: Any = None


def parse_sublayer(kind: str, value: Any, path: str) -> SublayerConfig:
    if value is None:
        value = {"name": "llama"}
    if isinstance(value, str):  # shorthand: `attention: cem`
        value = {"name": value}
    if isinstance(value, SublayerConfig):
        value = value.to_mapping()
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"expected a component name or a mapping with 'name', got {value!r}.")
    name = value.get("name", "llama")
    if not isinstance(name, str):
        raise ConfigError(join(path, "name"), f"expected a component name, got {name!r}.")
    spec = registry.get(kind, name, join(path, "name"))
    option_fields = [f.name for f in dataclasses.fields(spec.options)] if spec.options else []
    for key in value:
        if key not in GENERIC_SUBLAYER_KEYS and key not in option_fields:
            raise unknown(
                join(path, key), key, [*GENERIC_SUBLAYER_KEYS, *option_fields], what=f"key for {kind} {name!r}"
            )
    steps = value.get("steps", 1)
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise ConfigError(join(path, "steps"), f"expected an integer >= 1, got {steps!r}.")
    require(steps >= 1, join(path, "steps"), f"must be >= 1 (T recursion steps), got {steps}.")
    depth_mode = value.get("depth_mode", "recursion")
    if depth_mode not in ("recursion", "reuse"):
        raise unknown(join(path, "depth_mode"), depth_mode, ("recursion", "reuse"), what="value")
    if depth_mode == "recursion" and steps > 1 and not protocol.supports_recursion(spec.factory):
        raise ConfigError(
            join(path, "steps"),
            f"{kind} {name!r} has no within-layer recursion; use depth_mode: reuse for steps > 1.",
        )
    opts = {k: v for k, v in value.items() if k not in GENERIC_SUBLAYER_KEYS}
    options = parse(spec.options, opts, path) if spec.options else None
    protocol.check_steps(options, steps if depth_mode == "recursion" else 1, path)  # e.g. backprop_steps <= T
    return SublayerConfig(kind, name, steps, depth_mode, options)


def parse_model_config(mapping: Any, path: str = "model") -> ModelConfig:
    """Validate a `model:` mapping (or pass a ModelConfig through)."""
    if isinstance(mapping, ModelConfig):
        return mapping
    fields = parse(_ModelFields, mapping, path)
    if fields.size is not None and fields.size not in SIZE_PRESETS:
        raise unknown(join(path, "size"), fields.size, SIZE_PRESETS, what="size preset")
    if fields.size is None:
        for key in ("d_model", "n_layers", "n_heads", "d_mlp"):
            if getattr(fields, key) is None:
                raise ConfigError(
                    join(path, key), f"is required when no size preset is given (presets: {', '.join(SIZE_PRESETS)})."
                )
    cfg = ModelConfig(
        **{
            f.name: getattr(fields, f.name)
            for f in dataclasses.fields(_ModelFields)
            if f.name not in ("attention", "mlp")
        },
        attention=parse_sublayer("attention", fields.attention, join(path, "attention")),
        mlp=parse_sublayer("mlp", fields.mlp, join(path, "mlp")),
    )
    _check_dims(cfg, path)
    _check_model_options(cfg, path)
    return cfg


def _check_model_options(cfg: ModelConfig, path: str) -> None:
    momentum = cfg.stream_momentum
    require(cfg.base_d_model > 0, join(path, "base_d_model"), f"must be a positive integer, got {cfg.base_d_model}.")
    require(
        math.isfinite(cfg.readout_init_scale) and cfg.readout_init_scale > 0,
        join(path, "readout_init_scale"),
        f"must be a finite number > 0, got {cfg.readout_init_scale} (a zero readout: parametrization: mup "
        "with mup_readout: zero).",
    )
    require(
        0.0 < momentum < 1.0,
        join(path, "stream_momentum"),
        f"must be in (0, 1): the learnable mu = sigmoid(a) starts at a = logit({momentum}) "
        "(docs/design/energy-lens.md#s11-2-velocity-stream); for mu = 0 use stream: residual.",
    )
    if cfg.block == "parallel":
        _check_parallel(cfg, path)


def _check_parallel(cfg: ModelConfig, path: str) -> None:
    """`block: parallel` (docs/design/energy-lens.md#s11-3-energy-transformer-block): one joint step of T steps on both sublayers' energies."""
    for sub in (cfg.attention, cfg.mlp):
        sub_path = join(path, sub.kind)
        missing = protocol.missing_joint_step(sub.spec.factory)  # checked on the class, before building
        if missing:
            raise ConfigError(
                join(sub_path, "name"),
                f"{sub.kind} {sub.name!r} has no joint step ({', '.join(missing)}), "
                "which block: parallel needs (docs/design/energy-lens.md#s11-3-energy-transformer-block).",
            )
        require(
            sub.depth_mode == "recursion",
            join(sub_path, "depth_mode"),
            "block: parallel takes its T joint steps by recursion (docs/design/energy-lens.md#s11-3-energy-transformer-block); "
            "plain reuse is not defined for it.",
        )
        # The joint step is plain gradient descent from x^0 = h with the whole graph kept:
        # docs/design/energy-lens.md#s11-3-energy-transformer-block defines no momentum, normalized state or truncation for it.
        options = sub.options
        for key, plain in (("update", "gd"), ("recursion_state", "raw"), ("checkpoint_steps", False)):
            value = getattr(options, key, plain)
            require(
                value == plain,
                join(sub_path, key),
                f"must be {plain!r} under block: parallel (docs/design/energy-lens.md#s11-3-energy-transformer-block defines the joint step "
                f"as gradient descent from x^0 = h), got {value!r}.",
            )
        backprop = getattr(options, "backprop_steps", None)
        require(
            backprop is None or backprop == sub.steps,
            join(sub_path, "backprop_steps"),
            f"block: parallel differentiates every joint step; got {backprop}.",
        )
    require(
        cfg.mlp.steps == cfg.attention.steps,
        join(join(path, "mlp"), "steps"),
        f"block: parallel takes T = attention steps = {cfg.attention.steps} joint steps; "
        f"the MLP's steps must be equal, got {cfg.mlp.steps} (docs/design/energy-lens.md#s11-3-energy-transformer-block).",
    )


def _check_dims(cfg: ModelConfig, path: str) -> None:
    dims = cfg.dims
    for key in ("d_model", "n_layers", "n_heads", "d_mlp", "vocab_size", "max_seq_len"):
        value = getattr(dims, key)
        require(value > 0, join(path, key), f"must be a positive integer, got {value}.")
    require(cfg.norm_eps > 0, join(path, "norm_eps"), f"must be > 0, got {cfg.norm_eps}.")
    require(cfg.init_std > 0, join(path, "init_std"), f"must be > 0, got {cfg.init_std}.")
    require(
        dims.d_model % dims.n_heads == 0,
        join(path, "d_model"),
        f"d_model={dims.d_model} is not divisible by n_heads={dims.n_heads}.",
    )
    for sub in (cfg.attention, cfg.mlp):
        protocol.check_dims(sub.options, dims, join(path, sub.kind))


def llama_baseline_params(cfg: ModelConfig) -> int:
    """Parameters of the Llama baseline of the same size (docs/design/layers.md#s1-llama-baseline, Table 1).

    The Chinchilla budget of every variant is 20 x this number (docs/design/experiments.md#s7-training-recipe), so a CEM
    variant trains on the same tokens as its baseline.
    """
    d = cfg.dims
    per_layer = 4 * d.d_model**2 + 3 * d.d_model * d.d_mlp + 2 * d.d_model
    return 2 * d.vocab_size * d.d_model + d.n_layers * per_layer + d.d_model
