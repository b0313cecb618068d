"""Component registry: kind -> name -> (factory, typed options, description).

Every component, built-in or not, arrives through the entry-point group
`cem_ablate.components`: each entry point names a module (or a callable) that is
imported (called) once and registers its components with the `register` decorator.
The built-in zoo (the top-level `components` package, one file per family) is the
entry point `builtin` of this distribution (pyproject.toml), so this module never
imports `components` and the two do not import each other. Nothing in this package
needs editing to add a component.

A plugin that fails (its entry point does not import, or it registers something that
breaks the contract: a factory that is not callable, options that are not a dataclass,
or what the layer using its kind requires, `declare_kind`) costs only its own
components: the failure is recorded, one `warning:` line goes to stderr, and a config
that names a component it might have provided gets a `ConfigError` naming the plugin
and its entry point. The built-in zoo failing is a broken installation and raises.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from cem_ablate.config.errors import ConfigError, closest, unknown
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
    distribution: str | None = None  # "<name>==<version>" of the distribution whose entry point registered it

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


@dataclass(frozen=True)
class PluginFailure:
    """An entry point whose components are unavailable, and why (one line)."""

    name: str  # the entry point's name
    value: str  # what it points at, e.g. "my_package.attention"
    reason: str
    components: tuple[tuple[str, str], ...] = ()  # (kind, name) it registered before failing

    def describe(self) -> str:
        return f"plugin {self.name!r} (entry point {self.value}) failed to load: {self.reason}"


class ContractError(TypeError):
    """A registration breaks the component contract (raised inside the plugin's import)."""


_REGISTRY: dict[str, dict[str, ComponentSpec]] = {}
_CONTRACTS: dict[str, Callable[[ComponentSpec], str | None]] = {}
_FAILURES: list[PluginFailure] = []
_MISSING: list[tuple[str, str]] = []  # (kind, name) looked up and not registered, in lookup order
_loaded = False
_current_source = "built-in"
_current_distribution: str | None = None


def register(kind: str, name: str, *, options: type | None = None, description: str):
    """Class/function decorator registering a component factory under (kind, name)."""

    def decorator(factory):
        problem = _generic_contract(factory, options, description)
        if problem:
            raise ContractError(f"{kind} component {name!r}: {problem}")
        by_name = _REGISTRY.setdefault(kind, {})
        if name in by_name and by_name[name].factory is not factory:
            raise ValueError(f"component {kind}/{name} is registered twice")
        by_name[name] = ComponentSpec(kind, name, factory, options, description, _current_source, _current_distribution)
        return factory

    return decorator


def _generic_contract(factory: Any, options: Any, description: Any) -> str | None:
    if not callable(factory):
        return f"the factory {factory!r} is not callable (register a class or a function)"
    if options is not None and not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        return f"options={options!r} is not a dataclass type"
    if not isinstance(description, str):
        return "description is not a string"
    return None


def declare_kind(kind: str, contract: Callable[[ComponentSpec], str | None]) -> None:
    """The layer that builds components of `kind` states what they must provide:
    `contract(spec)` returns what a registration lacks, or None. Applied to every
    registration of that kind, including those already loaded."""
    _CONTRACTS[kind] = contract
    for spec in list(_REGISTRY.get(kind, {}).values()):
        _enforce(spec)


def _enforce(spec: ComponentSpec) -> bool:
    """Check one registration against its kind's contract; True if its plugin failed."""
    contract = _CONTRACTS.get(spec.kind)
    problem = contract(spec) if contract else None
    if problem is None:
        return False
    error = ContractError(f"{spec.kind} component {spec.name!r}: {problem}")
    if spec.source == "built-in":
        raise error
    _fail(_PLUGINS[spec.source], error)
    return True


def _fail(point: tuple[str, str], error: BaseException) -> None:
    """Drop every component the plugin registered, record why, warn once."""
    source = _plugin_source(*point)
    dropped = []
    for kind, by_name in _REGISTRY.items():
        for key in [k for k, spec in by_name.items() if spec.source == source]:
            del by_name[key]
            dropped.append((kind, key))
    reason = (f"{type(error).__name__}: {error}".splitlines() or [""])[0]
    failure = PluginFailure(*point, reason, tuple(dropped))
    _FAILURES.append(failure)
    print(f"warning: {failure.describe()}; its components are unavailable", file=sys.stderr)


def _plugin_source(name: str, value: str) -> str:
    return f"plugin {name} ({value})"


_PLUGINS: dict[str, tuple[str, str]] = {}  # source label -> (entry point name, value)


def failures() -> list[PluginFailure]:
    """Plugins that failed to load, in load order."""
    load_components()
    return list(_FAILURES)


def load_components() -> None:
    """Import the built-in zoo and every installed plugin (all entry points), once."""
    global _loaded, _current_source, _current_distribution
    if _loaded:
        return
    _loaded = True
    # The zoo first, then plugins by name: the load order (which one wins a clash, the
    # order of warnings) must not depend on the order of sys.path.
    points = sorted(
        entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: (ep.name != BUILTIN_ENTRY_POINT, ep.name, ep.value)
    )
    if not any(ep.name == BUILTIN_ENTRY_POINT for ep in points):
        raise RuntimeError(
            f"the built-in components are not registered: entry point {BUILTIN_ENTRY_POINT!r} of "
            f"group {ENTRY_POINT_GROUP!r} is missing; reinstall cem-ablate (pip install -e .)."
        )
    for ep in points:
        builtin = ep.name == BUILTIN_ENTRY_POINT
        source = "built-in" if builtin else _plugin_source(ep.name, ep.value)
        _PLUGINS[source] = (ep.name, ep.value)
        _current_source = source
        # A plugin's version is part of its components' code fingerprint (config/fingerprint.py).
        # The zoo's is not: its files are hashed and the platform version is in every trial key;
        # naming it would make the key depend on how the process found the zoo.
        _current_distribution = f"{ep.dist.name}=={ep.dist.version}" if ep.dist is not None and not builtin else None
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, type):
                obj()
        except Exception as error:  # a plugin costs only its own components
            if builtin:
                raise
            _fail((ep.name, ep.value), error)
            continue
        finally:
            _current_source, _current_distribution = "built-in", None
        for spec in [s for by_name in _REGISTRY.values() for s in by_name.values() if s.source == source]:
            if _enforce(spec):
                break


def get(kind: str, name: str, path: str = "") -> ComponentSpec:
    load_components()
    by_name = _REGISTRY.get(kind, {})
    if name in by_name:
        return by_name[name]
    if (kind, name) not in _MISSING:
        _MISSING.append((kind, name))
    for failure in _FAILURES:
        if (kind, name) in failure.components:
            raise ConfigError(path, f"{kind} component {name!r} is unavailable: {failure.describe()}.")
    if _FAILURES:
        plugins = "; ".join(f.describe() for f in _FAILURES)
        raise ConfigError(
            path,
            f"unknown {kind} component {name!r}; it may come from a plugin that failed: "
            f"{plugins}.{closest(name, by_name)} Loaded: {', '.join(sorted(by_name)) or 'none'}.",
        )
    if kind not in _REGISTRY:
        raise unknown(path, kind, _REGISTRY, what="component kind")
    raise unknown(path, name, by_name, what=f"{kind} component")


def missing() -> list[str]:
    """The components this process looked up and did not find, each with why: the plugin
    that failed to provide it, or that none installed registers it (for a caller that can
    go on without them, e.g. a report read from the stores)."""
    out = []
    for kind, name in _MISSING:
        failed = [f for f in _FAILURES if (kind, name) in f.components] or _FAILURES
        why = "; ".join(f.describe() for f in failed) if failed else "no installed plugin registers it"
        out.append(f"{kind} component {name!r} ({why})")
    return out


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
