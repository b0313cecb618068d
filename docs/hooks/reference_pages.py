"""MkDocs hook: the generated parts of the reference pages, rendered from the code at build time.

A page asks for a generated part with a marker line of its own,

    <!-- generated: cli -->

and `on_page_markdown` puts the Markdown in its place, so the reference cannot drift
from what it describes:

- `cli`: every subcommand of `cem-ablate`, from the parsers `cem_ablate/cli/main.py`
  builds (`subcommand_parser`): usage, description, examples, every option's flags,
  default and help.
- `run-config`: the keys of a run config, `name`, `model:`, `train:`, `data:`, from the
  typed dataclasses that parse them (`ModelConfig`, `TrainConfig`, `DataConfig`) and the
  size presets.
- `components`: every registered component kind, name and option, from the registry
  (the same source as `cem-ablate components`), plugins included.
- `study-file`: every key of a study file, from the dataclasses of `cem_ablate/study/spec.py`.

A key's type and default are read from its dataclass; its meaning is the comment the
code gives it (the comment lines right above the field and the comment on its line), or
for the model-wide options their one description, `MODEL_OPTIONS`. An unknown marker
fails the build.

The hook also warns (failing `--strict`) on a link to a file that `exclude_docs` keeps
out of the site, which MkDocs itself only logs at INFO.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import html
import inspect
import io
import json
import logging
import posixpath
import re
import textwrap
import tokenize
import types
import typing
from typing import Any, Literal, Union

log = logging.getLogger("mkdocs.hooks.reference_pages")
MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->[ \t]*$", re.M)


# -- the hook -----------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def render(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(
                f"{page.file.src_uri}: unknown generated part {name!r} (known: {', '.join(sorted(GENERATORS))})"
            )
        return GENERATORS[name]()

    warn_links_to_excluded(markdown, page, files)
    return MARKER.sub(render, markdown)


LINK = re.compile(r"\]\(([^()\s#]+)(?:#[^()\s]*)?\)")


def warn_links_to_excluded(markdown: str, page: Any, files: Any) -> None:
    """A link to a file `exclude_docs` keeps out of the site is a dead link: a warning
    (which fails `--strict`), where MkDocs itself only logs it at INFO."""
    folder = posixpath.dirname(page.file.src_uri)
    for target in LINK.findall(markdown):
        if "://" in target or target.startswith(("/", "mailto:")):
            continue
        file = files.get_file_from_path(posixpath.normpath(posixpath.join(folder, target)))
        if file is not None and file.inclusion.is_excluded():
            log.warning(
                f"Doc file '{page.file.src_uri}' links to '{target}', which is excluded from the "
                "site (exclude_docs in mkdocs.yml): link a page or an asset instead."
            )


# -- cells -------------------------------------------------------------------------------


def cell(text: str) -> str:
    """Text made safe for one cell of a Markdown table: one line, pipes escaped, and
    outside code spans `<`, `>`, `&` and `*` kept literal (help texts write `<path>`)."""
    parts = " ".join(str(text).split()).split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = html.escape(parts[i], quote=False).replace("*", "\\*").replace("|", "\\|")
    return "`".join(parts)


def code(text: str) -> str:
    """An inline code span for a table cell (a pipe inside one does not split the cell)."""
    text = " ".join(str(text).split())
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


def yaml_value(value: Any) -> str:
    """A default as a user writes it in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value and re.fullmatch(r"[\w.:/<>+-]+", value) else json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):
        return yaml_value({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    return repr(value)


def type_name(tp: Any) -> str:
    """An annotation as a reader of YAML needs it: `"a" | "b"`, `int | null`, `list of float`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return "any"
    if tp is type(None):
        return "null"
    if origin is Literal:
        return " | ".join(
            yaml_value(a) if a is None else f'"{a}"' if isinstance(a, str) else yaml_value(a) for a in args
        )
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin in (list, tuple) or tp in (list, tuple):
        if origin is tuple and args and Ellipsis not in args and len(args) > 1:
            return "[" + ", ".join(type_name(a) for a in args) + "]"
        return f"list of {type_name(args[0])}" if args else "list"
    if origin in (dict, typing.Mapping) or tp is dict:
        return f"mapping of {type_name(args[1])}" if len(args) == 2 and args[1] is not Any else "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return {"str": "string", "float": "number", "bool": "boolean", "int": "integer"}.get(
        getattr(tp, "__name__", ""), getattr(tp, "__name__", str(tp))
    )


# -- a dataclass's keys --------------------------------------------------------------------


@functools.cache
def field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment the source gives it, for `cls` and the dataclasses it
    inherits fields from: the comment lines right above the field, then the comment on
    its own lines (a bare string after the field, an attribute docstring, counts too)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            lines, _ = inspect.getsourcelines(klass)
        except (OSError, TypeError):
            continue
        source = textwrap.dedent("".join(lines))
        source_lines = source.splitlines()
        comments: dict[int, str] = {}
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string.lstrip("#").strip()
        body = ast.parse(source).body[0].body
        for i, node in enumerate(body):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            above = []
            line = node.lineno - 1
            while line >= 1 and source_lines[line - 1].strip().startswith("#"):
                above.insert(0, comments.get(line, ""))
                line -= 1
            inline = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
            after = body[i + 1] if i + 1 < len(body) else None
            doc = (
                [after.value.value]
                if isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
                else []
            )
            text = " ".join(part for part in [*above, *inline, *doc] if part)
            if text:
                out[node.target.id] = text
    return out


def own_doc(cls: type) -> str:
    """The class's docstring, not the signature `dataclass` writes where it has none."""
    doc = cls.__doc__ or ""
    return "" if doc.startswith(f"{cls.__name__}(") else inspect.cleandoc(doc)


def first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    match = re.match(r"(.+?[.:])(\s|$)", text)
    return match.group(1) if match else text


class Key(typing.NamedTuple):
    name: str
    type: str
    default: str
    meaning: str


def default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return yaml_value(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return yaml_value(f.default_factory())
    return "required"


def dataclass_keys(
    cls: type,
    meanings: dict[str, str] | None = None,
    sections: dict[str, str] | None = None,
    order: tuple[str, ...] = (),
) -> list[Key]:
    """The keys a user writes for dataclass `cls`, in declaration order (`order` first).

    `meanings` overrides a key's comment; `sections` names the anchor of the section
    that documents a mapping-valued key, whose default is then given there."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    fields.sort(key=lambda f: order.index(f.name) if f.name in order else len(order))
    keys = []
    for f in fields:
        tp = hints[f.name]
        meaning = (meanings or {}).get(f.name) or comments.get(f.name, "")
        if not meaning and dataclasses.is_dataclass(tp):
            meaning = first_sentence(own_doc(tp))
        default = default_text(f)
        anchor = (sections or {}).get(f.name)
        if anchor:
            meaning = f"{meaning} ([{f.name}](#{anchor}))".strip() if meaning else f"[below](#{anchor})"
            if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory()):
                default = "see below"
        keys.append(Key(f.name, type_name(tp), default, meaning))
    return keys


def key_table(keys: list[Key], prefix: str = "") -> str:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key in keys:
        rows.append(f"| {code(prefix + key.name)} | {code(key.type)} | {code(key.default)} | {cell(key.meaning)} |")
    return "\n".join(rows)


# -- cli -----------------------------------------------------------------------------------


def option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | help |", "|---|---|---|"]
    for action in parser._actions:  # argparse keeps no public list of its arguments
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            metavar = parser._get_formatter()._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            flags = ", ".join(f"{flag} {metavar}".strip() for flag in action.option_strings)
        else:
            flags = parser._get_formatter()._format_args(action, action.dest)
        if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
            default = ""
        else:
            default = code(yaml_value(action.default) if not isinstance(action.default, str) else action.default)
        helptext = action.help or ""
        if action.choices is not None:
            helptext += (" " if helptext else "") + "(one of " + ", ".join(str(c) for c in action.choices) + ")"
        if "%(" in helptext:
            helptext = helptext % {**vars(action), "prog": parser.prog}
        rows.append(f"| {code(flags)} | {default} | {cell(helptext)} |")
    return rows


def cli_markdown() -> str:
    from cem_ablate.cli.main import SUBCOMMANDS, build_parser, subcommand_parser

    top = build_parser()
    parts = [f"```text\n{top.format_usage().strip()}\n```", "", "| command | what it does |", "|---|---|"]
    parts += [f"| [`{name}`](#{name}) | {cell(text)} |" for name, text in SUBCOMMANDS.items()]
    for name in SUBCOMMANDS:
        parser = subcommand_parser(name)
        parts += [
            "",
            f"## `cem-ablate {name}` {{ #{name} }}",
            "",
            cell(parser.description or ""),
            "",
            f"```text\n{parser.format_usage().strip()}\n```",
            "",
        ]
        parts += option_rows(parser)
        if parser.epilog:
            parts += ["", f"```text\n{parser.epilog.strip()}\n```"]
    return "\n".join(parts)


# -- run config ----------------------------------------------------------------------------


def run_config_markdown() -> str:
    from cem_ablate.data.config import DataConfig, GPConfig, MQARConfig
    from cem_ablate.model.config import (
        GENERIC_SUBLAYER_KEYS,
        MODEL_OPTIONS,
        SIZE_PRESETS,
        ModelConfig,
        ModelOptions,
        SublayerConfig,
    )
    from cem_ablate.training.config import RunConfig, TrainConfig

    run = dataclass_keys(
        RunConfig,
        {"name": "the run's name (run folders, the MLflow experiment)"},
        {"model": "model", "train": "train", "data": "data"},
        order=("name",),
    )
    model_keys = dataclass_keys(
        ModelConfig,
        {
            **MODEL_OPTIONS,
            "attention": "the attention component and its options",
            "mlp": "the MLP component and its options",
        },
        {"attention": "sublayers", "mlp": "sublayers"},
        order=(
            *(name for name in ModelConfig.__annotations__ if name not in ("attention", "mlp")),
            *(f.name for f in dataclasses.fields(ModelOptions)),
            "attention",
            "mlp",
        ),
    )
    presets = ["| size | d_model | n_layers | n_heads | d_mlp |", "|---|---|---|---|---|"]
    presets += [
        f"| `{name}` | {d} | {layers} | {heads} | {mlp} |" for name, (d, layers, heads, mlp) in SIZE_PRESETS.items()
    ]
    hints = typing.get_type_hints(SublayerConfig)
    fields = {f.name: f for f in dataclasses.fields(SublayerConfig)}
    default_attention = dataclasses.fields(ModelConfig)[
        [f.name for f in dataclasses.fields(ModelConfig)].index("attention")
    ].default_factory()
    sublayer = [
        Key(
            "name",
            "string",
            yaml_value(default_attention.name),
            "the registered component of this kind ([Components](#components))",
        ),
        Key(
            "steps",
            type_name(hints["steps"]),
            default_text(fields["steps"]),
            "T: the recursion steps taken inside the component (`depth_mode: recursion`), or how often "
            "the block applies it (`reuse`)",
        ),
        Key(
            "depth_mode",
            type_name(hints["depth_mode"]),
            default_text(fields["depth_mode"]),
            "recursion: T steps inside the component, context and keys fixed (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp); "
            "reuse: the whole sublayer applied T times with the same weights (docs/design/layers.md#s5-plain-layer-reuse)",
        ),
    ]
    assert tuple(k.name for k in sublayer) == GENERIC_SUBLAYER_KEYS, GENERIC_SUBLAYER_KEYS
    return "\n".join(
        [
            "## Top level",
            "",
            key_table(run),
            "",
            "## `model:` { #model }",
            "",
            "Either a size preset or all four of `d_model`, `n_layers`, `n_heads`, `d_mlp` (explicit sizes "
            "override a preset's).",
            "",
            key_table(model_keys, "model."),
            "",
            "### Size presets { #size-presets }",
            "",
            "\n".join(presets),
            "",
            "### `model.attention`, `model.mlp` { #sublayers }",
            "",
            "A component name (`attention: cem`) or a mapping of the three keys below plus the options "
            "of the chosen component ([Components](#components)).",
            "",
            key_table(sublayer, "model.attention."),
            "",
            "## `train:` { #train }",
            "",
            key_table(dataclass_keys(TrainConfig), "train."),
            "",
            "## `data:` { #data }",
            "",
            key_table(dataclass_keys(DataConfig, sections={"gp": "data-gp", "mqar": "data-mqar"}), "data."),
            "",
            "### `data.gp` { #data-gp }",
            "",
            first_sentence(own_doc(GPConfig)),
            "",
            key_table(dataclass_keys(GPConfig), "data.gp."),
            "",
            "### `data.mqar` { #data-mqar }",
            "",
            first_sentence(own_doc(MQARConfig)),
            "",
            key_table(dataclass_keys(MQARConfig), "data.mqar."),
        ]
    )


def components_markdown() -> str:
    from cem_ablate import registry
    from cem_ablate.model import protocol  # noqa: F401  (declares what attention and mlp must provide)

    specs = registry.all_specs()
    kinds = sorted({spec.kind for spec in specs})
    parts = []
    for kind in kinds:
        parts += [f"### {kind} {{ #{kind} }}", ""]
        for spec in (s for s in specs if s.kind == kind):
            origin = "built-in" if spec.source == "built-in" else spec.source
            if spec.distribution:
                origin += f", {spec.distribution}"
            parts += [
                f"#### `{kind}: {spec.name}` {{ #{kind}-{spec.name} }}",
                "",
                f"{cell(spec.description)} *({cell(origin)})*",
                "",
            ]
            if spec.options is None:
                parts += ["No options.", ""]
                continue
            parts += [key_table(option_keys(spec.options, kinds)), ""]
    for failure in registry.failures():
        parts += ['!!! warning "A plugin failed to load"', "", f"    {cell(failure.describe())}", ""]
    return "\n".join(parts)


def option_keys(options: type, kinds: list[str]) -> list[Key]:
    """A component's options; a mapping-valued option's own keys follow it, dotted. An
    option named after a kind holds a component of that kind (`preconditioner: {name: diag}`)."""
    hints = typing.get_type_hints(options)
    out = []
    for key in dataclass_keys(options):
        tp = hints[key.name]
        if key.name in kinds:
            key = key._replace(meaning=f"{key.meaning} ([{key.name} components](#{key.name}))".strip())
        out.append(key)
        if dataclasses.is_dataclass(tp):
            for sub in dataclass_keys(tp):
                if key.name in kinds and sub.name == "name" and not sub.meaning:
                    sub = sub._replace(meaning=f"the {key.name} component ([{key.name}](#{key.name}))")
                out.append(sub._replace(name=f"{key.name}.{sub.name}"))
    return out


# -- study file ----------------------------------------------------------------------------


def study_file_markdown() -> str:
    from cem_ablate.study import spec

    sections = {
        "variants": "variants",
        "lr_search": "lr_search",
        "execution": "execution",
        "statistics": "statistics",
        "eval": "eval",
        "forecast": "forecast",
    }

    def section(title: str, anchor: str, cls: type, prefix: str) -> list[str]:
        return [f"## `{title}` {{ #{anchor} }}", "", own_doc(cls), "", key_table(dataclass_keys(cls), prefix), ""]

    top = dataclass_keys(spec.StudySpec, sections=sections)
    top = [
        key._replace(meaning=f"{key.meaning} ([mapping form](#seeds))") if key.name == "seeds" else key for key in top
    ]
    return "\n".join(
        [
            "## Top level",
            "",
            key_table(top),
            "",
            *section("variants[]", "variants", spec.VariantSpec, "variants[]."),
            *section("lr_search", "lr_search", spec.LrSearchConfig, "lr_search."),
            *section("seeds", "seeds", spec.SequentialSeeds, "seeds."),
            *section("execution", "execution", spec.ExecutionConfig, "execution."),
            *section("statistics", "statistics", spec.StatisticsConfig, "statistics."),
            *section("eval", "eval", spec.EvalConfig, "eval."),
            *section("forecast", "forecast", spec.ForecastConfig, "forecast."),
        ]
    )


GENERATORS = {
    "cli": cli_markdown,
    "run-config": run_config_markdown,
    "components": components_markdown,
    "study-file": study_file_markdown,
}
