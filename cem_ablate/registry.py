"""Component registry: kind -> name -> (factory, typed options, description).

Every component, built-in or not, arrives through the entry-point group
`cem_ablate.components`: each entry point names a module (or a callable) that is
imported (called) once and registers its components with the `register` decorator.
The built-in zoo (the top-level `components` package, one file per family) is the
entry point `builtin` of this distribution (pyproject.toml), so this module never
imports `components` and the two do not import each other. Nothing in this package
needs editing to add a component.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from cem_ablate.config.errors import unknown
from cem_ablate.config.schema import to_dict

ENTRY_POINT_GROUP = "cem_ablate.components"
BUILTIN_ENTRY_POINT = "builtin"  # the `components` package of this distribution


@dataclass(frozen=True)
class ComponentSpec:
    kind: str
    name: str
    factory: Callable[..., Any]
    options: type | None
    description: str
    source: str = "built-in"

    def option_defaults(self) -> dict[str, Any]:
        if self.options is None:
            return {}
        out = {}
        for f in dataclasses.fields(self.options):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = to_dict(f.default_factory())
            else:
                out[f.name] = "<required>"
        return out


_REGISTRY: dict[str, dict[str, ComponentSpec]] = {}
_loaded = False
_current_source = "built-in"


def register(kind: str, name: str, *, options: type | None = None, description: str):
    """Class/function decorator registering a component factory under (kind, name)."""

    def decorator(factory):
        by_name = _REGISTRY.setdefault(kind, {})
        if name in by_name and by_name[name].factory is not factory:
            raise ValueError(f"component {kind}/{name} is registered twice")
        by_name[name] = ComponentSpec(kind, name, factory, options, description, _current_source)
        return factory

    return decorator


def load_components() -> None:
    """Import the built-in zoo and every installed plugin (all entry points), once."""
    global _loaded, _current_source
    if _loaded:
        return
    _loaded = True
    points = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name != BUILTIN_ENTRY_POINT)
    if not any(ep.name == BUILTIN_ENTRY_POINT for ep in points):
        raise RuntimeError(f"the built-in components are not registered: entry point {BUILTIN_ENTRY_POINT!r} of "
                           f"group {ENTRY_POINT_GROUP!r} is missing; reinstall cem-ablate (pip install -e .).")
    for ep in points:
        builtin = ep.name == BUILTIN_ENTRY_POINT
        _current_source = "built-in" if builtin else f"plugin {ep.name} ({ep.value})"
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, type):
                obj()
        finally:
            _current_source = "built-in"


def get(kind: str, name: str, path: str = "") -> ComponentSpec:
    load_components()
    if kind not in _REGISTRY:
        raise unknown(path, kind, _REGISTRY, what="component kind")
    by_name = _REGISTRY[kind]
    if name not in by_name:
        raise unknown(path, name, by_name, what=f"{kind} component")
    return by_name[name]


def names(kind: str) -> list[str]:
    load_components()
    return sorted(_REGISTRY.get(kind, {}))


def all_specs() -> list[ComponentSpec]:
    load_components()
    return [spec for kind in sorted(_REGISTRY) for _, spec in sorted(_REGISTRY[kind].items())]


def format_listing(kinds: list[str] | None = None) -> str:
    """Human-readable listing for `cem-ablate components`."""
    lines = []
    for kind in kinds or sorted({s.kind for s in all_specs()}):
        lines.append(f"{kind}:")
        for spec in (s for s in all_specs() if s.kind == kind):
            origin = "" if spec.source == "built-in" else f"  [{spec.source}]"
            lines.append(f"  {spec.name:<20} {spec.description}{origin}")
            for key, value in spec.option_defaults().items():
                lines.append(f"      {key} = {value!r}")
    return "\n".join(lines)
