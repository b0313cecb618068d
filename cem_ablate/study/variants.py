"""Study file -> the list of variants to train, each validated as a full run config.

A variant is one model/train/data configuration; the trials of a variant differ only
in learning rate and seed. Variants are `variants` (or the base alone) times the
cartesian product of `axes`; each named baseline adds, per variant, the variant with
the baseline's overrides applied (the Llama "of the same size"), reusing an existing
variant when the configs coincide.

Every variant is validated here, once, into a typed `RunConfig`; nothing below
parses a mapping again. A variant's identity is its name plus `RunConfig.variant_key()`
(the resolved config without lr, seed and execution settings): rerunning an unchanged
study file finds the same Optuna studies and MLflow runs; changing anything that
affects training makes new ones.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cem_ablate.config import ConfigError, to_dict
from cem_ablate.config.identity import digest
from cem_ablate.config.loading import get_dotted, set_dotted
from cem_ablate.study.spec import LrSearchConfig, StudySpec
from cem_ablate.training.config import RunConfig, parse_run_config


@dataclass(frozen=True)
class Variant:
    name: str  # human-readable: "cem_attention,size=86M"
    key: str  # identity: "<slug>-<variant key>", names Optuna studies, MLflow tags, run dirs
    config: RunConfig = field(repr=False)  # validated; lr and seed are the study's first grid point
    axis_values: dict[str, Any] = field(default_factory=dict)  # dotted key -> value
    baselines: dict[str, str] = field(default_factory=dict)  # baseline name -> variant key
    role: str = "variant"  # "variant", "baseline" when only added as someone's baseline, or "proxy"
    lr_grid: tuple[float, ...] | None = None  # this variant's own grid (a transfer target: the proxy's lr*)
    proxy: str | None = None  # lr_search method transfer: the key of the variant's proxy (`proxies`)
    family: str | None = None  # forecast: the variant's name without its ladder width (one law per family)

    @property
    def variant_key(self) -> str:
        return self.config.variant_key()

    def run_config(self, lr: float, seed: int, name: str | None = None, threads: int | None = None) -> RunConfig:
        """The typed run config of one trial (run name and threads don't change results)."""
        return self.config.with_trial(lr, seed, name, threads)

    def lr_search(self, study_search: LrSearchConfig) -> LrSearchConfig:
        """The learning rates this variant's trials take: its own grid where it has one (a
        transfer target trains at its proxy's lr* only), else the study's."""
        if self.lr_grid is None:
            return study_search
        return dataclasses.replace(study_search, method="grid", grid=list(self.lr_grid), proxy=None, proxy_seeds=None)

    def trial_key(self, lr: float, seed: int) -> str:
        """The identity of this variant's trial at (lr, seed) under the running code
        (owned by `RunConfig.trial_key`: config plus code fingerprint)."""
        return self.run_config(lr, seed).trial_key()


@dataclass(frozen=True)
class ExpandedStudy:
    spec: StudySpec
    variants: list[Variant]
    mapping: dict[str, Any] = field(repr=False)  # the resolved study file (scale + --set applied), for the record
    proxies: list[Variant] = field(default_factory=list)  # lr_search method transfer: each variant's proxy
    forecast_targets: list[Variant] = field(default_factory=list)  # forecast: each family at the target (never trained)

    @property
    def study_hash(self) -> str:
        grids = [list(v.lr_grid) for v in self.variants if v.lr_grid is not None]
        search = {k: v for k, v in to_dict(self.spec.lr_search).items() if k != "fixed"}  # says, trains nothing
        return digest(
            [v.variant_key for v in self.variants] + [search, list(self.spec.seeds)] + ([grids] if grids else [])
        )

    def variant(self, key: str) -> Variant:
        for v in self.variants:
            if v.key == key:
                return v
        raise KeyError(key)


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


def _apply(
    mapping: dict[str, Any], overrides: dict[str, Any], origins: dict[str, str] | None = None, label: str = ""
) -> dict[str, Any]:
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
    family: str | None = None  # forecast: the name without the ladder width


def _drafts(spec: StudySpec) -> Iterator[_Draft]:
    """Explicit variants (or the base alone) times the cartesian product of the axes."""
    keys = list(spec.axes)
    for i, vspec in enumerate(spec.variants or [None]):
        for values in itertools.product(*(spec.axes[k] for k in keys)):
            axis_values = dict(zip(keys, values))
            run = copy.deepcopy(spec.base)
            origins: dict[str, str] = {}
            labels: dict[str, str] = {}
            parts: list[str] = []
            if vspec is not None:
                origins |= {k: f"variants[{i}].set.{k}" for k in vspec.set}
                labels["variant"] = vspec.name
                parts.append(vspec.name)
            origins |= {k: f"axes.{k}" for k in keys}
            labels |= {k: _format_value(v) for k, v in axis_values.items()}
            parts += [f"{short_key(k)}={_format_value(v)}" for k, v in axis_values.items()]
            name = ",".join(parts) or spec.name
            run = _apply(run, vspec.set if vspec is not None else {}, origins, name)
            run = _apply(run, axis_values, origins, name)
            if spec.forecast is None:
                yield _Draft(name, run, origins, labels)
                continue
            for j, rung in enumerate(spec.forecast.ladder):  # the ladder owns the width
                width = rung["model.d_model"]
                rung_origins = origins | {k: f"forecast.ladder[{j}].{k}" for k in rung}
                rung_name = f"{name},d_model={width}"
                yield _Draft(
                    rung_name,
                    _apply(run, rung, rung_origins, rung_name),
                    rung_origins,
                    labels | {"model.d_model": str(width)},
                    family=name,
                )


def _baseline_draft(draft: _Draft, name: str, overrides: dict[str, Any]) -> _Draft:
    """`draft` turned into its baseline: the same axis values, the baseline's overrides."""
    labels = {k: v for k, v in draft.labels.items() if k != "variant"}
    axis_part = [f"{short_key(k)}={v}" for k, v in labels.items()]
    origins = draft.origins | {k: f"baselines.{name}.{k}" for k in overrides}
    label = ",".join([name] + axis_part)
    family = (
        None
        if draft.family is None
        else ",".join([name] + [f"{short_key(k)}={v}" for k, v in labels.items() if k != "model.d_model"])
    )
    return _Draft(label, _apply(draft.run, overrides, origins, label), origins, {"variant": name} | labels, family)


def _named_by_what_it_keeps(draft: _Draft, overrides: dict[str, Any]) -> _Draft:
    """A baseline named after the variant settings it keeps (`llama,d_model=32,d_mlp=88`):
    variants that set d_model themselves give one baseline per width, all `llama` by the
    axis-only name, and a name that stands for several configs merged them in the report
    read by study name, the plots' legends and the tables."""

    def overridden(key: str) -> bool:
        return any(key == o or key.startswith(o + ".") for o in overrides)

    kept = [k for k, origin in draft.origins.items() if origin.startswith("variants[") and not overridden(k)]
    parts = [f"{short_key(k)}={_format_value(get_dotted(draft.run, k))}" for k in kept]
    family = None if draft.family is None else ",".join([draft.family] + parts)
    return dataclasses.replace(draft, name=",".join([draft.name] + parts), family=family)


def _validate(draft: _Draft, probe_lr: float, probe_seed: int) -> RunConfig:
    """The draft's run config, validated once (at the study's first lr and seed)."""
    probe = _apply(draft.run, {"train.lr": probe_lr, "train.seed": probe_seed})
    try:
        return parse_run_config(probe, path="")
    except ConfigError as err:
        raise _located(err, draft.origins, draft.name) from None


def _located(err: ConfigError, origins: dict[str, str], label: str) -> ConfigError:
    """Re-point a run-config error at the study-file key that set the bad value."""
    path = err.path or ""
    related = [k for k in origins if path == k or path.startswith(k + ".") or k.startswith(path + ".")]
    where = origins[max(related, key=len)] if related else (f"base.{path}" if path else "base")
    return ConfigError(where, f"{err.message.rstrip('.')} (in variant {label!r}, at {path or 'top level'}).")


def optuna_study_name(study_name: str, variant: Variant) -> str:
    """The Optuna study holding one variant's trials in a study's storage."""
    return f"{study_name}/{variant.key}"


def expand(spec: StudySpec, mapping: dict[str, Any] | None = None) -> ExpandedStudy:
    """All variants of the study, validated; raises ConfigError before anything runs."""
    probe_lr, probe_seed = spec.lr_search.lr_range[0], spec.seeds[0]
    drafts: list[_Draft] = []
    drafts_by_key: dict[str, _Draft] = {}  # variant key -> its draft (transfer builds proxies from them)
    variants: list[Variant] = []
    by_key: dict[str, Variant] = {}
    for draft in _drafts(spec):  # validated one by one: the first bad variant is reported
        drafts.append(draft)
        config = _validate(draft, probe_lr, probe_seed)
        key = config.variant_key()
        if key in by_key:
            raise ConfigError(
                "variants" if spec.variants else "axes",
                f"variant {draft.name!r} has the same run config as {by_key[key].name!r}.",
            )
        by_key[key] = Variant(
            draft.name, f"{slug(draft.name)}-{key}", config, draft.labels, {}, "variant", family=draft.family
        )
        variants.append(by_key[key])
        drafts_by_key[by_key[key].key] = draft
    # Baselines after all variants, so a baseline equal to a listed variant reuses it.
    pending = []
    for draft, variant in zip(drafts, list(variants)):
        for name, overrides in spec.baselines.items():
            base_draft = _baseline_draft(draft, name, overrides)
            pending.append((variant, name, overrides, base_draft, _validate(base_draft, probe_lr, probe_seed)))
    # One name, one config: a baseline name that would stand for several new configs (or
    # for a listed variant's) is spelled out by what each keeps.
    configs_of: dict[str, set[str]] = {}
    for _, _, _, base_draft, config in pending:
        if config.variant_key() not in by_key:
            configs_of.setdefault(base_draft.name, set()).add(config.variant_key())
    listed = {v.name for v in variants}
    for variant, name, overrides, base_draft, config in pending:
        key = config.variant_key()
        if key not in by_key:
            if len(configs_of[base_draft.name]) > 1 or base_draft.name in listed:
                base_draft = _named_by_what_it_keeps(base_draft, overrides)
            by_key[key] = Variant(
                base_draft.name,
                f"{slug(base_draft.name)}-{key}",
                config,
                base_draft.labels,
                {},
                "baseline",
                family=base_draft.family,
            )
            variants.append(by_key[key])
            drafts_by_key[by_key[key].key] = base_draft
        # a variant is not its own baseline, nor compared twice with one variant (reuse at
        # T = 1 is Llama: `llama` and `T1` baselines then name the same run)
        if key != variant.variant_key and by_key[key].key not in variant.baselines.values():
            variant.baselines[name] = by_key[key].key
    if spec.lr_search.pruner != "none":
        _check_pruning_runs_in_process(variants)
    proxies = (
        _proxies(spec, variants, drafts_by_key, probe_lr, probe_seed) if spec.lr_search.method == "transfer" else []
    )
    targets = _forecast_targets(spec, variants, drafts_by_key, probe_lr, probe_seed) if spec.forecast else []
    return ExpandedStudy(spec, variants, mapping if mapping is not None else to_dict(spec), proxies, targets)


def _forecast_targets(
    spec: StudySpec, variants: list[Variant], drafts: dict[str, _Draft], probe_lr: float, probe_seed: int
) -> list[Variant]:
    """`forecast:` each family (a variant or baseline across the ladder) at the target size,
    validated like any variant (its parameters are counted, it is never trained)."""
    assert spec.forecast is not None  # called for a forecast study only
    overrides = spec.forecast.target
    out: dict[str, Variant] = {}
    for variant in variants:
        assert variant.family is not None  # every variant of a forecast is a ladder rung of a family (_drafts)
        if variant.family in out:
            continue
        draft = drafts[variant.key]
        origins = draft.origins | {k: f"forecast.target.{k}" for k in overrides}
        target = _Draft(
            f"{variant.family}@target",
            _apply(draft.run, overrides, origins, variant.family),
            origins,
            draft.labels,
            variant.family,
        )
        config = _validate(target, probe_lr, probe_seed)
        out[variant.family] = Variant(
            target.name,
            f"{slug(variant.family)}-target-{config.variant_key()}",
            config,
            draft.labels,
            {},
            "forecast_target",
            family=variant.family,
        )
    return list(out.values())


def _proxies(
    spec: StudySpec, variants: list[Variant], drafts: dict[str, _Draft], probe_lr: float, probe_seed: int
) -> list[Variant]:
    """lr_search method transfer: every variant (baselines included) with the proxy overrides
    applied, validated here like any variant; variants whose proxies coincide share one."""
    overrides = spec.lr_search.proxy
    assert overrides is not None  # validated: method transfer requires lr_search.proxy
    by_key: dict[str, Variant] = {}
    for index, variant in enumerate(variants):
        draft = drafts[variant.key]
        origins = draft.origins | {k: f"lr_search.proxy.{k}" for k in overrides}
        proxy_draft = _Draft(
            f"{draft.name}@proxy", _apply(draft.run, overrides, origins, draft.name), origins, draft.labels
        )
        config = _validate(proxy_draft, probe_lr, probe_seed)
        key = config.variant_key()
        if key not in by_key:
            by_key[key] = Variant(
                proxy_draft.name, f"{slug(draft.name)}-proxy-{key}", config, draft.labels, {}, "proxy"
            )
        variants[index] = dataclasses.replace(variant, proxy=by_key[key].key)
    proxy_of = {v.key: v.proxy for v in variants}
    for variant in variants:  # a proxy is compared with its baselines' proxies
        proxy = next(p for p in by_key.values() if p.key == variant.proxy)
        for name, base_key in variant.baselines.items():
            base_proxy = proxy_of[base_key]
            assert base_proxy is not None  # every variant got its proxy just above
            if base_proxy != proxy.key:
                proxy.baselines.setdefault(name, base_proxy)
    return list(by_key.values())


def _check_pruning_runs_in_process(variants: list[Variant]) -> None:
    """The pruning callback lives in the study process; the engine runs a DDP trial in a
    launch process of its own, where Optuna is out of reach."""
    for v in variants:
        if v.config.train.world_size > 1:
            raise ConfigError(
                "lr_search.pruner",
                f"pruning needs single-process trials, but variant {v.name!r} "
                "trains on several devices (DDP runs in its own launch process); use pruner: none.",
            )
