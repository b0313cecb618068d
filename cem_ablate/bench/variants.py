"""Benchmark variants and sizes: short names -> `model:` mappings (docs/design/contract.md#s10-public-contract).

Variant names:

    llama                 the Llama baseline (docs/design/layers.md#s1-llama-baseline)
    hf_llama              transformers.LlamaForCausalLM with the same config and weights
                          (the external reference; measured eager)
    cem_<part>_t<T>[_mod...]
        part: attn (CEM attention + Llama MLP), mlp (Llama attention + CEM MLP),
              full (both CEM)
        defaults are the paper's recommendation: attention kq_diag shared,
        diag_lowrank preconditioners (rank 4 attention, 16 MLP), diag_update paper
        mods: ckpt (checkpoint_steps), ref (impl: reference), nodiag (kq_diag none),
              sdpa (kq_diag none + the SDPA kernel), blocked / flex (that attention
              kernel instead of `auto`), perhead (kq_diag per_head),
              exact (diag_update exact), diag / identity (preconditioner),
              hb / nesterov (update heavy_ball / nesterov with learnable mu, docs/design/energy-lens.md#s11-1-momentum)
    llama_nesterov_stream the Llama baseline with `stream: nesterov` (docs/design/energy-lens.md#s11-2-velocity-stream)
    et_parallel_t<T>[_mod...]
                          the Energy Transformer block (docs/design/energy-lens.md#s11-3-energy-transformer-block): CEM attention (defaults
                          and mods as above) + Hopfield MLP, `block: parallel`, T joint steps
    <label>={yaml}        any `attention` / `mlp` sub-config and the model options
                          (config.MODEL_OPTIONS: stream, stream_momentum, velocity_norm, block,
                          parametrization, base_d_model, step_scaling, mup_readout,
                          readout_init_scale),
                          e.g. 'mine={mlp: {name: cem, steps: 3}}', 'nes={stream: nesterov}'

Sizes: `bench` is the CPU targets' size (D 512, 8 heads, 6 layers, D_m 1376 = 8/3·D
rounded up to a multiple of 16, as the small presets are); any `model.size` preset
(tiny, mini, small, 86M, ...) works too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from cem_ablate.config.errors import ConfigError
from cem_ablate.model.config import MODEL_OPTIONS, SIZE_PRESETS, parse_model_config

BENCH_SIZE = {"d_model": 512, "n_layers": 6, "n_heads": 8, "d_mlp": 1376}
SIZES = ("bench", *SIZE_PRESETS)
EXTERNAL = "hf_llama"
BASELINE = "llama"

_CEM_NAME = re.compile(r"^cem_(attn|mlp|full)_t(\d+)((?:_[a-z]+)*)$")
_PARALLEL_NAME = re.compile(r"^et_parallel_t(\d+)((?:_[a-z]+)*)$")
MODIFIERS = (
    "ckpt",
    "ref",
    "nodiag",
    "sdpa",
    "blocked",
    "flex",
    "perhead",
    "exact",
    "diag",
    "identity",
    "hb",
    "nesterov",
)
UPDATES = {
    "hb": "heavy_ball",
    "nesterov": "nesterov",
}  # modifier -> docs/design/energy-lens.md#s11-1-momentum update (learnable mu)
SUBLAYER_KEYS = ("attention", "mlp")
# Named variants of model options on the Llama baseline (the momentum study's arms, docs/design/energy-lens.md#s11-2-velocity-stream).
NAMED = {"llama_nesterov_stream": {"stream": "nesterov"}}


@dataclass(frozen=True)
class Variant:
    label: str
    sublayers: dict[str, Any]  # {"attention": {...}, "mlp": {...}} (missing = llama)
    external: bool = False  # transformers' LlamaForCausalLM instead of build_model
    options: dict[str, Any] = field(default_factory=dict)  # model-level options (config.MODEL_OPTIONS)

    @property
    def is_baseline(self) -> bool:
        return self.label == BASELINE


def _cem_sublayers(part: str, steps: int, mods: list[str], path: str) -> dict[str, Any]:
    for mod in mods:
        if mod not in MODIFIERS:
            raise ConfigError(path, f"unknown variant modifier {mod!r}; allowed: {', '.join(MODIFIERS)}.")
    common: dict[str, Any] = {"name": "cem", "steps": steps}
    if "ckpt" in mods:
        common["checkpoint_steps"] = True
    if "ref" in mods:
        common["impl"] = "reference"
    precond = "diag" if "diag" in mods else "identity" if "identity" in mods else "diag_lowrank"
    common["preconditioner"] = precond
    attention = dict(common, kq_diag="shared")
    if "nodiag" in mods or "sdpa" in mods:
        attention["kq_diag"] = "none"
    for kernel in ("sdpa", "blocked", "flex"):
        if kernel in mods:
            attention["kernel"] = kernel
    if "perhead" in mods:
        attention["kq_diag"] = "per_head"
    if "exact" in mods:
        attention["diag_update"] = "exact"
    updates = [UPDATES[mod] for mod in mods if mod in UPDATES]
    if len(updates) > 1:
        raise ConfigError(path, f"modifiers {' and '.join(updates)} both set the update; choose one.")
    if updates:  # both CEM sublayers take the momentum (the MLP's `common` is copied below)
        common.update(update=updates[0], learnable_momentum=True)
        attention.update(update=updates[0], learnable_momentum=True)
    out: dict[str, Any] = {}
    if part in ("attn", "full"):
        out["attention"] = attention
    if part in ("mlp", "full"):
        out["mlp"] = dict(common)
    return out


def parse_variant(spec: str, path: str = "variants") -> Variant:
    spec = spec.strip()
    if "=" in spec:
        label, _, body = spec.partition("=")
        try:
            mapping = yaml.safe_load(body)
        except yaml.YAMLError as err:
            raise ConfigError(path, f"variant {label!r}: not valid YAML ({err.__class__.__name__}).") from None
        allowed = (*SUBLAYER_KEYS, *MODEL_OPTIONS)
        if not isinstance(mapping, dict) or not set(mapping) <= set(allowed):
            raise ConfigError(path, f"variant {label!r}: expected a mapping with keys among {', '.join(allowed)}.")
        sublayers = {k: v for k, v in mapping.items() if k in SUBLAYER_KEYS}
        return Variant(label.strip(), sublayers, options={k: v for k, v in mapping.items() if k not in SUBLAYER_KEYS})
    if spec == BASELINE:
        return Variant(spec, {})
    if spec == EXTERNAL:
        return Variant(spec, {}, external=True)
    if spec in NAMED:
        return Variant(spec, {}, options=dict(NAMED[spec]))
    if match := _PARALLEL_NAME.match(spec):
        steps, mods = _steps(spec, match.group(1), path), [m for m in match.group(2).split("_") if m]
        attention = _cem_sublayers("attn", steps, mods, path)["attention"]
        return Variant(
            spec, {"attention": attention, "mlp": {"name": "hopfield", "steps": steps}}, options={"block": "parallel"}
        )
    match = _CEM_NAME.match(spec)
    if not match:
        named = ", ".join(NAMED)
        raise ConfigError(
            path,
            f"unknown variant {spec!r}; use llama, hf_llama, {named}, "
            f"cem_<attn|mlp|full>_t<T>[_mod], et_parallel_t<T>[_mod], "
            f"or label={{yaml}} (see `cem-ablate bench --help`).",
        )
    part, steps, mods = match.group(1), _steps(spec, match.group(2), path), [m for m in match.group(3).split("_") if m]
    return Variant(spec, _cem_sublayers(part, steps, mods, path))


def is_energy_lens(label: str) -> bool:
    """Whether a named variant runs an energy-lens option: momentum over the steps, a velocity
    stream or the parallel block (docs/design/energy-lens.md#s11-energy-lens). A `label={yaml}` row keeps only its label,
    which does not say: False."""
    try:
        variant = parse_variant(label)
    except ConfigError:
        return False
    momentum = any(sub.get("update") in UPDATES.values() for sub in variant.sublayers.values())
    return (
        momentum
        or variant.options.get("stream", "residual") != "residual"
        or variant.options.get("block", "sequential") != "sequential"
    )


def _steps(spec: str, digits: str, path: str) -> int:
    steps = int(digits)
    if steps < 1:
        raise ConfigError(path, f"variant {spec!r}: T must be >= 1.")
    return steps


def model_mapping(variant: Variant, size: str, seq_len: int, vocab_size: int, path: str = "bench") -> dict[str, Any]:
    """The validated `model:` mapping of a variant at a size (raises ConfigError)."""
    dims = dict(BENCH_SIZE) if size == "bench" else {"size": size}
    mapping = {**dims, "vocab_size": vocab_size, "max_seq_len": seq_len, **variant.options, **variant.sublayers}
    parse_model_config(mapping, f"{path}[{variant.label}]")
    return mapping
