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
from collections.abc import Iterator
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


def _apply(mapping: dict[str, Any], overrides: dict[str, Any], origins: dict[str, str] | None = None,
           label: str = "") -> dict[str, Any]:
    out = copy.deepcopy(mapping)
    for key, value in overrides.items():
        try:
            set_dotted(out, key, copy.deepcopy(value))
        except ConfigError as err:  # e.g. `model.attention.x` under `attention: cem` (a string)
            raise _located(ConfigError(key, err.message), origins or {}, label) from None
    return out


@dataclass
class _Draft:
    """A variant before validation: its run mapping and where each override came from."""

    name: str
    run: dict[str, Any]
    origins: dict[str, str]  # dotted run-config key -> study-file key that set it (for errors)
    labels: dict[str, str]  # what the UI filters on: variant name and axis values


def _drafts(spec: StudySpec) -> Iterator[_Draft]:
    """Explicit variants (or the base alone) times the cartesian product of the axes."""
    keys = list(spec.axes)
    for i, vspec in enumerate(spec.variants or [None]):
        for values in itertools.product(*(spec.axes[k] for k in keys)):
            axis_values = dict(zip(keys, values))
            run, origins, labels, parts = copy.deepcopy(spec.base), {}, {}, []
            if vspec is not None:
                origins |= {k: f"variants[{i}].set.{k}" for k in vspec.set}
                labels["variant"] = vspec.name
                parts.append(vspec.name)
            origins |= {k: f"axes.{k}" for k in keys}
            labels |= {k: _format_value(v) for k, v in axis_values.items()}
            parts += [f"{short_key(k)}={_format_value(v)}" for k, v in axis_values.items()]
            name = ",".join(parts) or spec.name
            run = _apply(run, vspec.set if vspec is not None else {}, origins, name)
            yield _Draft(name, _apply(run, axis_values, origins, name), origins, labels)


def _baseline_draft(draft: _Draft, name: str, overrides: dict[str, Any]) -> _Draft:
    """`draft` turned into its baseline: the same axis values, the baseline's overrides."""
    labels = {k: v for k, v in draft.labels.items() if k != "variant"}
    axis_part = [f"{short_key(k)}={v}" for k, v in labels.items()]
    origins = draft.origins | {k: f"baselines.{name}.{k}" for k in overrides}
    label = ",".join([name] + axis_part)
    return _Draft(label, _apply(draft.run, overrides, origins, label), origins, {"variant": name} | labels)


def _config_hash(draft: _Draft, probe_lr: float, probe_seed: int) -> str:
    """Validate the draft's run config; hash its resolved form without per-trial keys."""
    from cem_ablate.training.config import parse_run_config

    probe = _apply(draft.run, {"train.lr": probe_lr, "train.seed": probe_seed})
    try:
        resolved = parse_run_config(probe, path="").to_mapping()
    except ConfigError as err:
        raise _located(err, draft.origins, draft.name) from None
    # Per-trial settings are not part of the variant's identity.
    resolved.pop("name", None)
    for key in ("lr", "seed", "threads"):
        resolved["train"].pop(key, None)
    return short_hash(resolved)


def _located(err: ConfigError, origins: dict[str, str], label: str) -> ConfigError:
    """Re-point a run-config error at the study-file key that set the bad value."""
    path = err.path or ""
    related = [k for k in origins if path == k or path.startswith(k + ".") or k.startswith(path + ".")]
    where = origins[max(related, key=len)] if related else (f"base.{path}" if path else "base")
    return ConfigError(where, f"{err.message.rstrip('.')} (in variant {label!r}, at {path or 'top level'}).")


def expand(spec: StudySpec, mapping: dict[str, Any] | None = None) -> ExpandedStudy:
    """All variants of the study, validated; raises ConfigError before anything runs."""
    probe_lr, probe_seed = spec.lr_search.lr_range[0], spec.seeds[0]
    drafts: list[_Draft] = []
    variants: list[Variant] = []
    by_hash: dict[str, Variant] = {}
    for draft in _drafts(spec):  # validated one by one: the first bad variant is reported
        drafts.append(draft)
        config_hash = _config_hash(draft, probe_lr, probe_seed)
        if config_hash in by_hash:
            raise ConfigError("variants" if spec.variants else "axes",
                              f"variant {draft.name!r} has the same run config as {by_hash[config_hash].name!r}.")
        by_hash[config_hash] = Variant(draft.name, f"{slug(draft.name)}-{config_hash}", draft.run, draft.labels,
                                       {}, "variant", config_hash)
        variants.append(by_hash[config_hash])
    # Baselines after all variants, so a baseline equal to a listed variant reuses it.
    for draft, variant in zip(drafts, list(variants)):
        for name, overrides in spec.baselines.items():
            base_draft = _baseline_draft(draft, name, overrides)
            config_hash = _config_hash(base_draft, probe_lr, probe_seed)
            if config_hash not in by_hash:
                by_hash[config_hash] = Variant(base_draft.name, f"{slug(base_draft.name)}-{config_hash}",
                                               base_draft.run, base_draft.labels, {}, "baseline", config_hash)
                variants.append(by_hash[config_hash])
            if config_hash != variant.config_hash:
                variant.baselines[name] = by_hash[config_hash].key
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
