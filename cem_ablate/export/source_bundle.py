"""The platform's own model source, copied as flat files for a Hugging Face directory.

An exported model runs the very code that trained it: the modules that build it
(`cem_ablate.model.assembly` and everything of the platform it imports) and the
modules of the components it uses (built-in or plugin, with the modules of their own
packages they import) are copied byte for byte except their import statements, which
become relative imports of flat files in one folder:

    from cem_ablate.model.blocks import RMSNorm  ->  from .cem_ablate__model__blocks import RMSNorm
    from cem_ablate.model import protocol        ->  from . import cem_ablate__model__protocol as protocol

Hugging Face's dynamic module loader copies a modeling file and, recursively, every
file it imports as `from .name import ...` into one package, so the folder loads with
`trust_remote_code=True` and needs only torch, transformers and what the copied code
imports from outside the bundled packages (numpy). Logits therefore match the
platform's by construction; tests/export check it in a process that never imports
cem_ablate.

Whole or refused: the bundled packages are the platform (`cem_ablate`), the built-in zoo
and its public building blocks (`components`), and every top-level module or package of
each component's own distribution (a plugin of two modules, or one package importing
its siblings, is copied whole, transitively). Any other import of a copied file must be
the standard library or one of `OUTSIDE_DEPENDENCIES`, which a Hugging Face environment
has; anything else (a third-party package, a module outside the plugin, an `import a.b`
statement that cannot be rewritten, a module with no Python source) stops the export
with one `ConfigError` naming the module, the import and the chain of imports that
reached it, before a file is written.

`bundle_index(...)` is the file the modeling code imports: one `from .x import` line
per copied module (so the loader copies every one, including those only reached by
`from . import x`), the registry marked loaded (there are no entry points outside the
platform: the copied components are the whole zoo), then `build_model` and
`parse_model_config`.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.config.errors import ConfigError

PLATFORM_PACKAGE = "cem_ablate"
BUILDING_BLOCKS_PACKAGE = "components"  # the built-in zoo: plugins may import its building blocks
# What an exported folder may import from outside itself: transformers and what it requires.
OUTSIDE_DEPENDENCIES = ("torch", "transformers", "numpy", "safetensors", "tokenizers", "huggingface_hub")
REGISTRY_MODULE = "cem_ablate.registry"
PROTOCOL_MODULE = "cem_ablate.model.protocol"
ASSEMBLY_MODULE = "cem_ablate.model.assembly"
MODEL_CONFIG_MODULE = "cem_ablate.model.config"  # parse_model_config (the assembly imports it: always copied)
DECODING_MODULE = "cem_ablate.model.decoding"  # the components' cached decoding (generate with use_cache)
BUNDLE_INDEX = "cem_ablate_bundle"  # the generated file the modeling code imports


def flat_name(module: str) -> str:
    """`a.b.c` -> `a__b__c`: unique across packages, a valid module name."""
    return module.replace(".", "__")


@dataclass(frozen=True)
class Bundle:
    files: dict[str, str]  # flat file name (with .py) -> rewritten source
    modules: tuple[str, ...]  # the dotted modules copied, in a stable order
    component_modules: tuple[str, ...]  # the modules that register the model's components


def _source_file(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _source_file_or_none(module: str) -> Path | None:
    try:
        return _source_file(module)
    except (ImportError, ValueError):
        return None


def _is_module(name: str) -> bool:
    return _source_file_or_none(name) is not None


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    anchor = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


class _Unbundled(Exception):
    """An import the export cannot copy (turned into one ConfigError with its chain)."""

    def __init__(self, module: str, imported: str):
        super().__init__(module, imported)
        self.module, self.imported = module, imported


def _outside(top: str) -> bool:
    """A top-level module an exported folder may import without copying it."""
    return top in sys.stdlib_module_names or top in OUTSIDE_DEPENDENCIES


def _plain_import_target(module: str, alias: ast.alias) -> str:
    """The flat module an `import a.b [as c]` of a bundled package becomes, or a ConfigError:
    only a name bound to the module itself can be rewritten (`import a.b` binds `a`)."""
    if "." in alias.name and not alias.asname:
        raise ConfigError(
            "export",
            f"{module} uses `import {alias.name}`, which cannot be rewritten for an export "
            f"(it binds `{alias.name.split('.')[0]}`); write `from {alias.name.rpartition('.')[0]} "
            f"import {alias.name.rpartition('.')[2]}` or `import {alias.name} as ...`.",
        )
    return alias.name


def _targets(module: str, path: Path, tree: ast.AST, packages: set[str]) -> list[str]:
    """The bundled-package modules `module` imports (anywhere in the file); a ConfigError
    for an import that is neither bundled nor an allowed outside dependency."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in packages:
                    out.append(_plain_import_target(module, alias))
                elif not _outside(top):
                    raise _Unbundled(module, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path, node)
            top = base.split(".")[0]
            if top not in packages:
                if not _outside(top):
                    raise _Unbundled(module, base)
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append(sub if _is_module(sub) else base)
    return out


def _rewrite(module: str, path: Path, source: str, tree: ast.AST, packages: set[str]) -> str:
    """`source` with every import of a bundled package made a flat relative import."""
    lines = source.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(alias.name.split(".")[0] in packages for alias in node.names):
                statements = [
                    f"from . import {flat_name(alias.name)} as {alias.asname or alias.name}"
                    if alias.name.split(".")[0] in packages
                    else f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    for alias in node.names
                ]
                indent = lines[node.lineno - 1][: node.col_offset]
                edits.append((node.lineno, node.end_lineno, indent + ("\n" + indent).join(statements) + "\n"))
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        base = _absolute(module, path, node)
        if base.split(".")[0] not in packages:
            continue
        statements = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if _is_module(sub):
                statements.append(f"from . import {flat_name(sub)} as {alias.asname or alias.name}")
            else:
                name = alias.name if not alias.asname else f"{alias.name} as {alias.asname}"
                statements.append(f"from .{flat_name(base)} import {name}")
        indent = lines[node.lineno - 1][: node.col_offset]
        edits.append((node.lineno, node.end_lineno, indent + ("\n" + indent).join(statements) + "\n"))
    for start, end, text in sorted(edits, reverse=True):
        lines[start - 1 : end] = [text]
    return "".join(lines)


def build_bundle(component_modules: Iterable[str], sibling_modules: Iterable[str] = ()) -> Bundle:
    """The copied, rewritten source of the model assembly and `component_modules`: every
    module they import, transitively, of their own top-level packages, of
    `sibling_modules` (the top-level modules their distributions install,
    `config.fingerprint.distribution_modules`) and of the platform and the zoo; or one
    ConfigError naming what cannot be copied."""
    component_modules = tuple(dict.fromkeys(component_modules))
    packages = (
        {PLATFORM_PACKAGE, BUILDING_BLOCKS_PACKAGE}
        | {m.split(".")[0] for m in component_modules}
        | set(sibling_modules)
    )
    roots = [REGISTRY_MODULE, PROTOCOL_MODULE, *component_modules, ASSEMBLY_MODULE, DECODING_MODULE]
    seen: dict[str, tuple[Path, str, ast.AST]] = {}
    reached_from: dict[str, str] = {}
    order: list[str] = []
    todo = list(roots)
    while todo:
        module = todo.pop(0)
        if module in seen:
            continue
        path = _source_file_or_none(module)
        if path is None:
            raise ConfigError(
                "export",
                f"cannot copy {module!r} into the export: it has no Python source file{_chain(module, reached_from)}.",
            )
        source = path.read_text()
        tree = ast.parse(source)
        seen[module] = (path, source, tree)
        order.append(module)
        try:
            targets = _targets(module, path, tree, packages)
        except _Unbundled as gap:
            raise ConfigError(
                "export",
                f"{gap.module} imports {gap.imported!r}, which the export cannot bundle: it "
                f"is not part of {', '.join(sorted(packages - {PLATFORM_PACKAGE}))} nor of the standard "
                f"library or {', '.join(OUTSIDE_DEPENDENCIES)}, so the folder would not load where it "
                f"is not installed{_chain(gap.module, reached_from)}.",
            ) from None
        for target in targets:
            if target not in seen:
                reached_from.setdefault(target, module)
                todo.append(target)
    files = {f"{flat_name(m)}.py": _rewrite(m, seen[m][0], seen[m][1], seen[m][2], packages) for m in order}
    files[f"{BUNDLE_INDEX}.py"] = bundle_index(order, component_modules)
    return Bundle(files, tuple(order), component_modules)


def _chain(module: str, reached_from: dict[str, str]) -> str:
    """ " (reached by a -> b -> module)" from the component that imports it, or ""."""
    chain = [module]
    while chain[-1] in reached_from:
        chain.append(reached_from[chain[-1]])
    return f" (reached by {' -> '.join(reversed(chain))})" if len(chain) > 1 else ""


def bundle_index(modules: list[str], component_modules: tuple[str, ...]) -> str:
    lines = [
        '"""Generated by `cem-ablate export`: the platform modules this model runs (see',
        'cem_ablate/export/source_bundle.py). Importing it registers the copied components."""',
        "",
        f"from . import {flat_name(REGISTRY_MODULE)} as _registry",
        "",
        "# No entry points outside the platform: the copied components are the whole zoo.",
        "_registry._loaded = True",
        "",
    ]
    # The protocol declares the sublayer kinds before the components register (as in the platform).
    for module in [PROTOCOL_MODULE, *component_modules, *sorted(set(modules) - {PROTOCOL_MODULE, *component_modules})]:
        lines.append(f"from .{flat_name(module)} import __name__ as _{flat_name(module)}  # noqa: F401")
    lines += [
        "",
        f"from .{flat_name(ASSEMBLY_MODULE)} import build_model  # noqa: E402,F401",
        f"from .{flat_name(MODEL_CONFIG_MODULE)} import parse_model_config  # noqa: E402,F401",
        f"from .{flat_name(DECODING_MODULE)} import decode, missing_hooks, new_cache  # noqa: E402,F401",
        "",
    ]
    return "\n".join(lines)
