"""Benchmark variants and sizes: short names -> `model:` mappings (SPEC §10).

Variant names:

    llama                 the Llama baseline (SPEC §1)
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
              exact (diag_update exact), diag / identity (preconditioner)
    <label>={yaml}        any model sub-config, e.g. 'mine={mlp: {name: cem, steps: 3}}'

Sizes: `bench` is the issue-5 target (D 512, 8 heads, 6 layers, D_m 1376 = 8/3·D
rounded up to a multiple of 16, as the small presets are); any `model.size` preset
(tiny, mini, small, 86M, ...) works too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from cem_ablate.config.errors import ConfigError
from cem_ablate.model.config import SIZE_PRESETS, parse_model_config

BENCH_SIZE = {"d_model": 512, "n_layers": 6, "n_heads": 8, "d_mlp": 1376}
SIZES = ("bench", *SIZE_PRESETS)
EXTERNAL = "hf_llama"
BASELINE = "llama"

_CEM_NAME = re.compile(r"^cem_(attn|mlp|full)_t(\d+)((?:_[a-z]+)*)$")
MODIFIERS = ("ckpt", "ref", "nodiag", "sdpa", "blocked", "flex", "perhead", "exact", "diag", "identity")


@dataclass(frozen=True)
class Variant:
    label: str
    sublayers: dict[str, Any]  # {"attention": {...}, "mlp": {...}} (missing = llama)
    external: bool = False  # transformers' LlamaForCausalLM instead of build_model

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
        if not isinstance(mapping, dict) or not set(mapping) <= {"attention", "mlp"}:
            raise ConfigError(path, f"variant {label!r}: expected a mapping with 'attention' and/or 'mlp'.")
        return Variant(label.strip(), mapping)
    if spec == BASELINE:
        return Variant(spec, {})
    if spec == EXTERNAL:
        return Variant(spec, {}, external=True)
    match = _CEM_NAME.match(spec)
    if not match:
        raise ConfigError(path, f"unknown variant {spec!r}; use llama, hf_llama, cem_<attn|mlp|full>_t<T>[_mod], "
                                f"or label={{yaml}} (see `cem-ablate bench --help`).")
    part, steps, mods = match.group(1), int(match.group(2)), [m for m in match.group(3).split("_") if m]
    if steps < 1:
        raise ConfigError(path, f"variant {spec!r}: T must be >= 1.")
    return Variant(spec, _cem_sublayers(part, steps, mods, path))


def model_mapping(variant: Variant, size: str, seq_len: int, vocab_size: int, path: str = "bench") -> dict[str, Any]:
    """The validated `model:` mapping of a variant at a size (raises ConfigError)."""
    dims = dict(BENCH_SIZE) if size == "bench" else {"size": size}
    mapping = {**dims, "vocab_size": vocab_size, "max_seq_len": seq_len, **variant.sublayers}
    parse_model_config(mapping, f"{path}[{variant.label}]")
    return mapping
