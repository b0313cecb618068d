"""Study file -> the list of variants to train, each validated as a full run config.

A variant is one model/train/data configuration; the trials of a variant differ only
in learning rate and seed. Variants are `variants` (or the base alone) times the
cartesian product of `axes`; each named baseline adds, per variant, the variant with
the baseline's overrides applied (the Llama "of the same size"), reusing an existing
variant when the configs coincide.

A variant's identity is its name plus a hash of its resolved run config (lr and seed
left out): rerunning an unchanged study file finds the same Optuna studies and MLflow
runs; changing anything that affects training makes new ones.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from cem_ablate.config import ConfigError, to_dict
from cem_ablate.config.loading import set_dotted
from cem_ablate.study.spec import StudySpec

HASH_CHARS = 8


@dataclass(frozen=True)
class Variant:
    name: str  # human-readable: "cem_attention,size=86M"
    key: str  # identity: "<slug>-<hash>", names Optuna studies, MLflow tags, run dirs
    mapping: dict[str, Any] = field(repr=False)  # run config without train.lr / train.seed
    axis_values: dict[str, Any] = field(default_factory=dict)  # dotted key -> value
    baselines: dict[str, str] = field(default_factory=dict)  # baseline name -> variant key
    role: str = "variant"  # "variant", or "baseline" when only added as someone's baseline
    config_hash: str = ""

    def run_mapping(self, lr: float, seed: int, name: str | None = None,
                    threads: int | None = None) -> dict[str, Any]:
        """The run config of one trial (lr, seed; run name and threads don't change results)."""
        out = copy.deepcopy(self.mapping)
        set_dotted(out, "train.lr", float(lr))
        set_dotted(out, "train.seed", int(seed))
        if name is not None:
            out["name"] = name
        if threads is not None and (out.get("train") or {}).get("threads") is None:
            set_dotted(out, "train.threads", int(threads))
        return out

    def run_config(self, lr: float, seed: int, name: str | None = None, threads: int | None = None):
        from cem_ablate.training.config import parse_run_config

        return parse_run_config(self.run_mapping(lr, seed, name, threads), path="")


@dataclass(frozen=True)
class ExpandedStudy:
    spec: StudySpec
    variants: list[Variant]
    mapping: dict[str, Any] = field(repr=False)  # the resolved study file (scale + --set applied)

    @property
    def study_hash(self) -> str:
        return short_hash([v.config_hash for v in self.variants]
                          + [to_dict(self.spec.lr_search), list(self.spec.seeds)])

    def variant(self, key: str) -> Variant:
        for v in self.variants:
            if v.key == key:
                return v
        raise KeyError(key)


def short_hash(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


def slug(text: str, limit: int = 60) -> str:
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "_", text)[:limit].strip("_") or "variant"


def short_key(dotted: str) -> str:
    """`model.attention.name` -> `attention.name` for display names."""
    head, _, rest = dotted.partition(".")
    return rest if head in ("model", "train", "data") and rest else dotted


def _format_value(value: Any) -> str:
    """Axis value for names: a sublayer mapping shows its component name."""
    if isinstance(value, dict):
        return str(value["name"]) if "name" in value else json.dumps(value, sort_keys=True)
    return str(value)


def _apply(mapping: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(mapping)
    for key, value in overrides.items():
        set_dotted(out, key, copy.deepcopy(value))
    return out


def _canonical(mapping: dict[str, Any], probe_lr: float, probe_seed: int, origins: dict[str, str],
               label: str) -> dict[str, Any]:
    """Validate a variant's run config; return its resolved form without lr and seed."""
    from cem_ablate.training.config import parse_run_config

    probe = _apply(mapping, {"train.lr": probe_lr, "train.seed": probe_seed})
    try:
        resolved = parse_run_config(probe, path="").to_mapping()
    except ConfigError as err:
        raise _located(err, origins, label) from None
    # Per-trial settings are not part of the variant's identity.
    resolved.pop("name", None)
    for key in ("lr", "seed", "threads"):
        resolved["train"].pop(key, None)
    return resolved


def _located(err: ConfigError, origins: dict[str, str], label: str) -> ConfigError:
    """Re-point a run-config error at the study-file key that set the bad value."""
    path = err.path or ""
    best = ""
    for key in origins:
        if path == key or path.startswith(key + ".") or key.startswith(path + "."):
            if len(key) > len(best):
                best = key
    where = origins[best] if best else join_base(path)
    return ConfigError(where, f"{err.message.rstrip('.')} (in variant {label!r}, at {path or 'top level'}).")


def join_base(path: str) -> str:
    return f"base.{path}" if path else "base"


def expand(spec: StudySpec, mapping: dict[str, Any] | None = None) -> ExpandedStudy:
    """All variants of the study, validated; raises ConfigError before anything runs."""
    probe_lr = spec.lr_search.lr_range[0]
    probe_seed = spec.seeds[0]
    explicit = spec.variants or [None]
    axis_keys = list(spec.axes)
    variants: list[Variant] = []
    by_hash: dict[str, Variant] = {}
    pending_baselines: list[tuple[int, str, dict[str, Any], dict[str, str], str, dict[str, Any]]] = []

    for i, vspec in enumerate(explicit):
        for values in itertools.product(*(spec.axes[k] for k in axis_keys)):
            axis_values = dict(zip(axis_keys, values))
            origins: dict[str, str] = {}
            run = copy.deepcopy(spec.base)
            if vspec is not None:
                run = _apply(run, vspec.set)
                origins.update({k: f"variants[{i}].set.{k}" for k in vspec.set})
            run = _apply(run, axis_values)
            origins.update({k: f"axes.{k}" for k in axis_keys})
            parts = ([vspec.name] if vspec is not None else []) + [
                f"{short_key(k)}={_format_value(v)}" for k, v in axis_values.items()
            ]
            name = ",".join(parts) or spec.name
            resolved = _canonical(run, probe_lr, probe_seed, origins, name)
            config_hash = short_hash(resolved)
            labels = ({"variant": vspec.name} if vspec is not None else {}) | {
                k: _format_value(v) for k, v in axis_values.items()
            }
            if config_hash in by_hash:
                raise ConfigError(
                    f"variants[{i}]" if vspec is not None else "axes",
                    f"variant {name!r} has the same run config as {by_hash[config_hash].name!r}.",
                )
            variant = Variant(name, f"{slug(name)}-{config_hash}", run, labels, {}, "variant", config_hash)
            variants.append(variant)
            by_hash[config_hash] = variant
            for bname, overrides in spec.baselines.items():
                b_origins = origins | {k: f"baselines.{bname}.{k}" for k in overrides}
                pending_baselines.append((len(variants) - 1, bname, _apply(run, overrides), b_origins,
                                          ",".join([bname] + parts[1 if vspec is not None else 0:]), labels))

    # Baselines after all variants, so one that equals a listed variant reuses it.
    for index, bname, run, origins, bvariant_name, labels in pending_baselines:
        resolved = _canonical(run, probe_lr, probe_seed, origins, bvariant_name)
        config_hash = short_hash(resolved)
        baseline = by_hash.get(config_hash)
        if baseline is None:
            blabels = {**labels, "variant": bname} if "variant" in labels else {**labels, "baseline": bname}
            baseline = Variant(bvariant_name, f"{slug(bvariant_name)}-{config_hash}", run, blabels, {},
                               "baseline", config_hash)
            variants.append(baseline)
            by_hash[config_hash] = baseline
        owner = variants[index]
        if baseline.key != owner.key:
            owner.baselines[bname] = baseline.key
    if spec.lr_search.pruner != "none":
        _check_pruning_runs_in_process(variants, probe_lr, probe_seed)
    return ExpandedStudy(spec, variants, mapping if mapping is not None else to_dict(spec))


def _check_pruning_runs_in_process(variants: list[Variant], lr: float, seed: int) -> None:
    """The pruning callback lives in the study process; the engine runs a DDP trial in a
    launch process of its own, where Optuna is out of reach."""
    for v in variants:
        if v.run_config(lr, seed).train.world_size > 1:
            raise ConfigError("lr_search.pruner", f"pruning needs single-process trials, but variant {v.name!r} "
                              "trains on several devices (DDP runs in its own launch process); use pruner: none.")
