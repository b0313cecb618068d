"""Typed configuration: YAML -> validated dataclasses, with errors that name the key."""

from cem_ablate.config.errors import ConfigError
from cem_ablate.config.loading import apply_overrides, load_yaml, merge
from cem_ablate.config.schema import parse, require, to_dict

__all__ = ["ConfigError", "apply_overrides", "load_yaml", "merge", "parse", "require", "to_dict"]
