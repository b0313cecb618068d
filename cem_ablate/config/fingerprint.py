"""The code fingerprint: a digest of the source that determines a trial's result.

`RunConfig.trial_key()` promises that two trials with one key train the same function
with the same code; this is the "same code" part. Two kinds of source go in, read as
files (nothing here imports the code it fingerprints):

- the platform modules that build, train and evaluate a model: every `*.py` under
  `cem_ablate/{model,training,data,config}/` and `cem_ablate/registry.py`, whatever
  files exist there at runtime;
- every component module a config uses (`ComponentSource`, collected by
  `RunConfig.code_fingerprint`): the module defining the registered factory and,
  transitively, the modules of the same top-level package it imports (read with
  `ast`: `components/cem_attention.py` brings `energy_recursion.py`,
  `preconditioner.py`, `alibi.py`, ... but not `swiglu.py`), the top-level modules of
  its own distribution it imports (a plugin of two modules), the zoo's modules it imports
  (`components.attention_blocks` and what that imports), plus for a plugin its
  distribution's name and version.

Not in it, so editing them keeps every result: the CLI, `study/` (queue, reuse,
statistics, reports), `tracking/`, `bench/`, docs, tests and the study files.

What is hashed is what runs, not the bytes: each module's syntax tree (`ast`) with
its string-literal statements (docstrings) dropped, written out without line and
column numbers (`module_digest`). Comments never reach the tree, so a comment,
docstring or formatting edit keeps every key; any other edit (a constant, an
operator, a name) changes the tree and the key. A file that does not parse is
hashed as bytes. The tree is written field by field with empty fields left out
(the form `ast.dump` takes from Python 3.13 on) and without the empty f-string parts
only 3.12 makes, so Python 3.10 to 3.13 give one digest for one source (checked on
every module of the repository).

Each file's digest is read once per process and cached: a process fingerprints the
code it imported when it started, not an edit made while it trains.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cem_ablate.config.identity import KEY_CHARS, digest

PLATFORM_ROOT = Path(__file__).resolve().parents[1]  # the `cem_ablate` package
PLATFORM_PARTS = ("model", "training", "data", "config", "registry.py")  # under PLATFORM_ROOT
DISTRIBUTION_PREFIX = "dist:"  # part name of a plugin distribution: "dist:<name>" -> version
ZOO_PACKAGE = "components"  # the built-in zoo, beside PLATFORM_ROOT: its building blocks are public


@dataclass(frozen=True)
class ComponentSource:
    """Where a registered component's code lives (registry.ComponentSpec)."""

    module: str  # the module defining the factory, e.g. "components.cem_attention"
    file: str | None  # its source file (None: not from a file, e.g. defined in __main__)
    distribution: str | None = None  # "<name>==<version>" of the plugin that registered it


@dataclass(frozen=True)
class CodeFingerprint:
    digest: str
    parts: Mapping[str, str] = field(default_factory=dict)  # file name (or dist:<name>) -> digest (version)

    def changed_parts(self, old_parts: Mapping[str, str]) -> list[str]:
        """Names of the parts that differ from `old_parts` (edited, added or removed)."""
        return sorted(name for name in set(self.parts) | set(old_parts) if self.parts.get(name) != old_parts.get(name))


def code_fingerprint(components: Iterable[ComponentSource], platform_root: Path | None = None) -> CodeFingerprint:
    """The fingerprint of the platform plus `components` (see the module docstring)."""
    root = Path(platform_root) if platform_root is not None else PLATFORM_ROOT
    parts = dict(platform_parts(root))
    for component in sorted(set(components), key=lambda c: c.module):
        parts.update(component_parts(component))
    return CodeFingerprint(digest(sorted(parts.items())), parts)


@functools.cache
def platform_parts(root: Path) -> tuple[tuple[str, str], ...]:
    files = []
    for part in PLATFORM_PARTS:
        path = root / part
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return tuple(
        (f"{root.name}/{p.relative_to(root).as_posix()}", file_digest(p)) for p in files if "__pycache__" not in p.parts
    )


@functools.cache
def component_parts(component: ComponentSource) -> tuple[tuple[str, str], ...]:
    out = {}
    if component.distribution:
        name, _, version = component.distribution.partition("==")
        out[DISTRIBUTION_PREFIX + name] = version
    if component.file is None or not Path(component.file).is_file():
        out[f"module:{component.module}"] = "unreadable"  # still named: a change of module changes the key
        return tuple(sorted(out.items()))
    siblings = distribution_modules(component.distribution.partition("==")[0]) if component.distribution else ()
    for name, path in sorted(package_closure(component.module, Path(component.file), frozenset(siblings)).items()):
        out[name] = file_digest(path)
    return tuple(sorted(out.items()))


@functools.cache
def distribution_modules(distribution: str) -> tuple[str, ...]:
    """The top-level modules and packages a plugin's distribution installs (read from its
    metadata, nothing imported): a component module importing a sibling top-level module
    of its own distribution brings that module too."""
    from importlib.metadata import packages_distributions

    wanted = distribution.replace("_", "-").lower()
    return tuple(
        sorted(
            top
            for top, owners in packages_distributions().items()
            if any(o.replace("_", "-").lower() == wanted for o in owners) and top.isidentifier()
        )
    )


@functools.cache
def file_digest(path: Path) -> str:
    """The digest of what the module at `path` runs (`module_digest`)."""
    return module_digest(Path(path).read_bytes())


def module_digest(source: bytes) -> str:
    """The digest of a module's syntax tree without its docstrings (see the module
    docstring); of the bytes when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte in the source
        return hashlib.sha256(b"bytes\0" + source).hexdigest()[:KEY_CHARS]
    return hashlib.sha256(("ast\0" + normalized_tree(tree)).encode()).hexdigest()[:KEY_CHARS]


def normalized_tree(node: ast.AST) -> str:
    """`node` written out as `Name(field=..., ...)` without positions, string-literal
    statements (docstrings: no-ops when run) or empty fields (None, []): a field a newer
    Python adds empty (3.12's `type_params`) leaves the text of old code as it was."""
    fields = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            value = [v for v in value if not is_string_statement(v) and not is_empty_fstring_part(node, v)]
        if value is None or value == []:
            continue
        fields.append(f"{name}={_written(value)}")
    return f"{type(node).__name__}({', '.join(fields)})"


def _written(value) -> str:
    if isinstance(value, ast.AST):
        return normalized_tree(value)
    if isinstance(value, list):
        return "[" + ", ".join(_written(v) for v in value) + "]"
    return f"{type(value).__name__}:{value!r}"  # a constant's type too: 1 and 1.0 and True differ


def is_empty_fstring_part(parent: ast.AST, node) -> bool:
    """An empty literal part of an f-string: Python 3.12 adds one after a nested format
    spec (`f"{k:<{w}}"`) where 3.10, 3.11 and 3.13 add none."""
    return (
        isinstance(parent, ast.JoinedStr)
        and isinstance(node, ast.Constant)
        and node.value == ""
        and isinstance(node.value, str)
    )


def is_string_statement(node) -> bool:
    """A statement that is only a string literal: a docstring (or an attribute's), a no-op."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def cache_clear() -> None:
    """Forget every digest read (for tests that edit a copy of the code in-process)."""
    for cached in (platform_parts, component_parts, file_digest, distribution_modules):
        cached.cache_clear()


# -- the modules a component module imports from its own package -----------------------


def package_base(module: str, file: Path) -> Path:
    """The folder holding the module's top-level package (or the module itself)."""
    depth = module.count(".") + (1 if file.name == "__init__.py" else 0)
    return file.resolve().parents[depth]


def module_file(base: Path, module: str) -> Path | None:
    """The source file of `module` under `base`, or None if it is no file there."""
    path = base.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def package_closure(module: str, file: Path, siblings: frozenset[str] = frozenset()) -> dict[str, Path]:
    """{name relative to its base: file} of `file` and, transitively, of the modules it
    imports of its own top-level package, of the top-level modules `siblings` (its
    distribution's), and of the zoo's package `components` (its public building blocks,
    which a plugin may import; the zoo's base is beside the platform's). Package
    `__init__`s count only when imported by name: the zoo's `__init__` imports every
    family, which a config does not use."""
    base = package_base(module, file)
    top = module.split(".")[0]
    bases = {t: base for t in {top, *siblings}}
    bases.setdefault(ZOO_PACKAGE, PLATFORM_ROOT.parent)
    seen: dict[str, tuple[Path, Path]] = {module: (base, file.resolve())}
    todo = [module]
    while todo:
        name = todo.pop()
        at, path = seen[name]
        for target in imported_modules(name, path, at):
            target_base = bases.get(target.split(".")[0])
            if target_base is None or target in seen:
                continue
            target_file = module_file(target_base, target)
            if target_file is not None:
                seen[target] = (target_base, target_file.resolve())
                todo.append(target)
    return {found.relative_to(at.resolve()).as_posix(): found for at, found in seen.values()}


def imported_modules(name: str, path: Path, base: Path) -> set[str]:
    """Modules `name` (at `path`) imports: `from pkg import mod` names the submodule
    `pkg.mod` where that is a file, else `pkg`."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    try:
        tree = ast.parse(path.read_bytes())
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            anchor_module = node.module or ""
            if node.level:  # relative import
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                anchor_module = ".".join(anchor + ([anchor_module] if anchor_module else []))
            for alias in node.names:
                sub = f"{anchor_module}.{alias.name}" if anchor_module else alias.name
                found.add(sub if module_file(base, sub) is not None else anchor_module)
    return {m for m in found if m}
