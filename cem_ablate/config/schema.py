"""Typed config parsing: plain mappings (from YAML) -> frozen dataclasses.

Every config section of the platform is a dataclass; `parse(cls, mapping, path)`
checks keys and types once, at the edge, and raises `ConfigError` naming the key
path and the allowed values. Range checks live in each dataclass's `validate(path)`
method, which `parse` calls after building it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Protocol, TypeVar, Union, get_args, get_origin, runtime_checkable

from cem_ablate.config.errors import ConfigError, unknown


class DataclassInstance(Protocol):
    """What `dataclasses.fields` accepts (typeshed's own `_typeshed.DataclassInstance`, which
    exists only for the type checker: the export bundles this module and imports what it imports)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


T = TypeVar("T", bound=DataclassInstance)


@runtime_checkable
class Validated(Protocol):
    """A config dataclass that checks its own values once parsed (raising ConfigError
    under `path`); `parse` calls it. Optional: a dataclass without it is not checked."""

    def validate(self, path: str) -> None: ...


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _same_shape(tp: Any, value: Any) -> bool:
    """Whether `value` has the container shape of annotation `tp` (mapping or list)."""
    origin = get_origin(tp)
    if isinstance(value, Mapping):
        return dataclasses.is_dataclass(tp) or origin in (dict, Mapping) or tp is dict
    if isinstance(value, list):
        return origin in (list, tuple) or tp in (list, tuple)
    return False


def coerce(tp: Any, value: Any, path: str) -> Any:
    """Check `value` against annotation `tp`, converting where lossless."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise unknown(path, value, choices, what="value")
        return value
    if origin in (Union, types.UnionType):
        return _coerce_union(tp, value, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, str) and "name" in {f.name for f in dataclasses.fields(tp)}:
            value = {"name": value}  # shorthand: `preconditioner: diag`
        return parse(tp, value, path)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, f"expected a list, got {value!r}.")
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [coerce(item_tp, v, join(path, i)) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"expected a mapping, got {value!r}.")
        args = get_args(tp)
        val_tp = args[1] if len(args) == 2 else Any
        return {k: coerce(val_tp, v, join(path, str(k))) for k, v in value.items()}
    return _coerce_scalar(tp, value, path)


def _coerce_union(tp: Any, value: Any, path: str) -> Any:
    """The first member of the union `tp` that `value` coerces to; else the error that
    names what the value most likely meant."""
    args = get_args(tp)
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return coerce(arg, value, path)
        except ConfigError as err:
            errors.append((arg, err))
    # A mapping can only have meant the mapping-shaped member (`seeds: {min: 2, at: owned}`
    # -> seeds.at's own error, not "expected list | SequentialSeeds"); likewise a list.
    shaped = [err for arg, err in errors if _same_shape(arg, value)]
    if len(errors) == 1 or len(shaped) == 1:
        raise (errors[0][1] if len(errors) == 1 else shaped[0])
    raise ConfigError(path, f"expected {_type_name(tp)}, got {value!r}.")


def _coerce_scalar(tp: Any, value: Any, path: str) -> Any:
    """bool, int, float and str: checked, and converted where lossless (2.0 -> 2, "1e-3" -> 0.001)."""
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}.")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(path, f"expected an integer, got {value!r}.")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            # YAML 1.1 reads "1e-3" (no dot) as a string: accept numeric strings.
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
            raise ConfigError(path, f"expected a number, got {value!r}.")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {value!r}.")
        return value
    return value


def parse(cls: type[T], mapping: Any, path: str = "") -> T:
    """Build dataclass `cls` from `mapping`, rejecting unknown keys and bad types."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(path, f"expected a mapping of {_field_list(cls)}, got {mapping!r}.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in mapping.items():
        if key not in fields:
            raise unknown(join(path, key), key, fields)
        kwargs[key] = coerce(hints[key], value, join(path, key))
    missing = [
        name
        for name, f in fields.items()
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(join(path, missing[0]), "is required.")
    obj = cls(**kwargs)
    if isinstance(obj, Validated):
        obj.validate(path)
    return obj


def _field_list(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls))


def to_dict(obj: Any) -> Any:
    """Dataclass -> plain nested dict (for logging, YAML dumps, MLflow params)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def require(condition: bool, path: str, message: str) -> None:
    """Range check helper for `validate` methods."""
    if not condition:
        raise ConfigError(path, message)
