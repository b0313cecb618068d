"""The generated reference pages, built by MkDocs with the site's own hook
(docs/hooks/reference_pages.py) and Markdown extensions: an option that an installed
plugin registers is on the built config page with its type, default and meaning, and
the CLI page holds every subcommand, option and default of the real parsers.

The site built here holds the real CLI, config and study-file pages and a stub for each
page they link to (the other pages are not needed to check the generated ones); the
whole site is built with `--strict` by .ci/run. Skipped where MkDocs is not installed
(the `docs` extra, which the `test` extra includes).
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.test_plugins import _install

pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")

pytestmark = pytest.mark.slow  # one MkDocs build (the hook imports the model code)

ROOT = Path(__file__).resolve().parents[2]

# A real plugin: a module and a dist-info with an entry point in `cem_ablate.components`.
PLUGIN = textwrap.dedent("""
    from dataclasses import dataclass
    from typing import Literal

    from torch import nn

    from cem_ablate.registry import register


    @dataclass(frozen=True)
    class GatedOptions:
        gate_scale: float = 0.25  # multiplies the gate before its nonlinearity
        gate_kind: Literal["sigmoid", "tanh"] = "tanh"
        # the hidden width, as a multiple of d_mlp
        width_multiplier: int | None = None


    @register("mlp", "docs_gated", options=GatedOptions, description="A gated MLP that documents its options.")
    class GatedMLP(nn.Module):
        def __init__(self, dims, options, steps=1):
            super().__init__()

        def forward(self, h):
            return h

        def flops_per_token(self, seq_len):
            return 0.0
""")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built site (its folder), with the plugin installed for the build."""
    tmp = tmp_path_factory.mktemp("docs_site")
    plugin_site = tmp / "plugin_site"
    _install(plugin_site, "docs-gated", {"docs_gated_mlp": PLUGIN}, {"docs_gated": "docs_gated_mlp"})
    docs = tmp / "docs"
    (docs / "reference").mkdir(parents=True)
    pages = ["reference/cli.md", "reference/config.md", "reference/study-file.md"]
    for page in pages:
        shutil.copy(ROOT / "docs" / page, docs / page)
    (docs / "index.md").write_text("# Home\n")
    (docs / "reference" / "components.md").write_text("# Components\n")  # a link target of config.md
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(
        docs_dir=str(docs),
        hooks=[str(ROOT / "docs" / "hooks" / "reference_pages.py")],
        plugins=["search"],
        nav=["index.md", *pages, "reference/components.md"],
    )
    config.pop("exclude_docs", None)
    (tmp / "mkdocs.yml").write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(plugin_site), str(ROOT)]),
        "NO_MKDOCS_2_WARNING": "1",
        "OMP_NUM_THREADS": "1",
    }
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(tmp / "mkdocs.yml"),
            "--site-dir",
            str(tmp / "site"),
        ],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "warning: plugin" not in built.stderr  # the plugin loaded
    return tmp / "site"


def _rows(page: str) -> list[list[str]]:
    """Every table row of a built page, its cells as plain text."""
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        rows.append([" ".join(html.unescape(re.sub(r"<[^>]+>", "", c)).split()) for c in cells])
    return [row for row in rows if row]


def _section(page: str, anchor: str) -> str:
    """The built page from the heading `anchor` to the next heading of its level or higher."""
    start = re.search(rf'<h(\d) id="{re.escape(anchor)}"', page)
    assert start, f"no heading #{anchor}"
    level = int(start.group(1))
    end = re.compile(rf"<h[1-{level}][ >]").search(page, start.end())
    return page[start.start() : end.start() if end else len(page)]


def test_plugin_option_is_on_the_config_page_with_its_type_and_default(site):
    page = (site / "reference" / "config" / "index.html").read_text()
    section = _section(page, "mlp-docs_gated")
    assert "A gated MLP that documents its options." in section
    assert "plugin docs_gated (docs_gated_mlp), docs-gated==0.1" in html.unescape(section)
    rows = {row[0]: row[1:] for row in _rows(section)}
    assert rows["gate_scale"] == ["number", "0.25", "multiplies the gate before its nonlinearity"]
    assert rows["gate_kind"] == ['"sigmoid" | "tanh"', "tanh", ""]
    assert rows["width_multiplier"] == ["integer | null", "null", "the hidden width, as a multiple of d_mlp"]
    # the built-in zoo is there too, and the run config's own keys
    assert re.search(r'<h4 id="attention-cem"', page) and re.search(r'<h2 id="train"', page)
    assert ["train.lr", "number", "0.001", "peak learning rate"] in _rows(page)


def test_cli_page_has_every_subcommand_and_option_of_the_parser(site):
    from cem_ablate.cli.main import SUBCOMMANDS, subcommand_parser

    page = (site / "reference" / "cli" / "index.html").read_text()
    assert [row[0] for row in _rows(page)[: len(SUBCOMMANDS)]] == list(SUBCOMMANDS)
    for name in SUBCOMMANDS:
        parser = subcommand_parser(name)
        section = _section(page, name)
        assert f"usage: cem-ablate {name}" in section
        rows = _rows(section)
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if action.option_strings:  # "-s S, --seeds S": the flags, each with its metavar
                matches = [
                    row
                    for row in rows
                    if [piece.split(" ")[0] for piece in row[0].split(", ")] == action.option_strings
                ]
            else:  # a positional: its name as the usage line shows it ("[key.path=value ...]")
                matches = [
                    row for row in rows if not row[0].startswith("-") and (action.metavar or action.dest) in row[0]
                ]
            assert len(matches) == 1, (name, action.option_strings or action.dest, rows)
            _, default, helptext = matches[0]
            if action.nargs != 0 and action.default is not None:
                assert (
                    default == str(action.default)
                    or default == " ".join(map(str, action.default))
                    or default.strip("[]").split(", ") == [str(v) for v in action.default]
                ), (name, action.dest, default)
            if action.help:
                assert " ".join(action.help.replace("`", "").split()) in helptext, (name, action.dest, helptext)
