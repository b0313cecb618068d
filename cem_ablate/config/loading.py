"""YAML files and dotted `key.path=value` overrides, read with a safe loader only."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from cem_ablate.config.errors import ConfigError


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError("", f"config file {str(path)!r} does not exist.")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError("", f"{path} is not valid YAML: {err}".replace("\n", " ")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("", f"{path} must hold a mapping at the top level.")
    return data


def get_dotted(mapping: Mapping[str, Any], key: str, default: Any = None) -> Any:
    node: Any = mapping
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def flatten_dotted(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}: the inverse of set_dotted, for MLflow params/tags.

    An empty mapping stays a leaf, so a key set to {} is not lost.
    """
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten_dotted(value, name + "."))
        else:
            out[name] = value
    return out


def set_dotted(mapping: dict[str, Any], key: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, creating intermediate mappings."""
    parts = key.split(".")
    node = mapping
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(".".join(parts[: i + 1]), f"is {child!r}, not a mapping; cannot set {key}.")
        node = child
    node[parts[-1]] = value


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge: mappings merge recursively, everything else is replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_overrides(mapping: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply CLI overrides like `train.lr=1e-3 model.attention.name=cem`."""
    out = copy.deepcopy(dict(mapping))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "an override must look like key.path=value.")
        key, raw = item.split("=", 1)
        set_dotted(out, key.strip(), yaml.safe_load(raw) if raw.strip() else None)
    return out
