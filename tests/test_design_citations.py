"""Every design citation in the code, the tests and the docs is a link a reader can follow:
a path `docs/design/<page>.md#<anchor>` (code, text) or a relative Markdown link to a
Design page (docs pages) whose anchor is a heading of that page, with an explicit
`{#id}` or the id mkdocs' table of contents gives it. No citation of the old design
document without a link is left (`scripts/spec_citations.py` rewrites them)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
S = "\N{SECTION SIGN}"  # so that this file cites nothing itself
BARE = "SPEC " + S
HEADING = re.compile(r"^#{1,6}\s+(.*?)(?:\s*\{#([^}\s]+)[^}]*\})?\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_CITATION = re.compile(r"docs/design/([\w.-]+\.md)#([\w-]+)")
MD_LINK = re.compile(r"\]\(([^)\s]*design/[\w.-]+\.md)#([\w-]+)\)")


def _spec_citations():
    spec = importlib.util.spec_from_file_location("spec_citations", REPO / "scripts" / "spec_citations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def heading_ids(page: Path) -> set[str]:
    """The ids of the page's headings: an explicit `{#id}`, else mkdocs' slug of the text."""
    ids, fenced = set(), False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            ids.add(match.group(2) or slugify(match.group(1), "-"))
    return ids


def cited_files():
    return list(_spec_citations().files(REPO))


def test_no_design_citation_is_left_without_a_link():
    bare = [
        f"{p.relative_to(REPO)}:{n}"
        for p in cited_files()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if BARE in line
    ]
    assert not bare, "run python scripts/spec_citations.py:\n  " + "\n  ".join(bare)


def test_every_citation_resolves_to_a_heading_of_a_design_page():
    anchors = {page.name: heading_ids(page) for page in (DOCS / "design").glob("*.md")}
    checked, broken = 0, []
    for path in cited_files():
        text = path.read_text()
        for page, anchor in CODE_CITATION.findall(text):
            checked += 1
            if anchor not in anchors.get(page, set()):
                broken.append(f"{path.relative_to(REPO)}: docs/design/{page}#{anchor}")
        if path.suffix == ".md" and DOCS in path.parents:
            for target, anchor in MD_LINK.findall(text):
                checked += 1
                resolved = (path.parent / target).resolve()
                if resolved.parent != (DOCS / "design").resolve() or anchor not in anchors.get(resolved.name, set()):
                    broken.append(f"{path.relative_to(REPO)}: {target}#{anchor}")
    assert checked > 200  # the code, tests and docs cite the design throughout
    assert not broken, "citations of anchors no Design page has:\n  " + "\n  ".join(broken)


def test_every_section_number_has_one_anchor():
    sections = _spec_citations().design_sections()
    assert {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "11.1", "11.2", "11.3", "12"} <= set(sections)
    assert sections["7"] == ("experiments.md", "s7-training-recipe")


def test_the_rewrite_links_ranges_and_lists_and_a_second_run_changes_nothing(tmp_path):
    script = _spec_citations()
    sections = script.design_sections()
    code = tmp_path / "module.py"
    code.write_text(f'"""Steps ({BARE}2-{S}4 and {S}11.3; paper {S}2.3)."""\n')
    assert script.rewrite(code, sections) == (
        '"""Steps (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s4-preconditioners and '
        "docs/design/energy-lens.md#s11-3-energy-transformer-block; paper " + S + '2.3)."""\n'
    )
    page = DOCS / "guides" / "example.md"  # a docs page: relative links; code spans keep the path
    text = f"The recipe ({BARE}7, {S}8) and `x` (`{BARE}1`).\n```\n{BARE}12\n```\n"
    out = script.rewrite_markdown(text, sections, page.parent)
    assert out == (
        "The recipe ([design " + S + "7](../design/experiments.md#s7-training-recipe), "
        "[" + S + "8](../design/experiments.md#s8-learning-rate-search)) and `x` "
        "(`docs/design/layers.md#s1-llama-baseline`).\n```\n"
        "docs/design/parametrization.md#s12-parametrization\n```\n"
    )
    assert script.rewrite_markdown(out, sections, page.parent) == out
    code.write_text(f"# {BARE}99\n")
    with pytest.raises(script.UnknownSection):
        script.rewrite(code, sections)


def test_the_trees_are_rewritten():
    """What a merge brings in gets rewritten before it lands: the script finds nothing to do."""
    assert _spec_citations().main(["--check"]) == 0
