"""Rewrite every citation of the old design document ("SPEC §7") into a link to the
section of the docs' Design pages that holds it, so a reader can follow it.

    python scripts/spec_citations.py            # rewrite cem_ablate/, components/, tests/, docs/
    python scripts/spec_citations.py --check    # list what it would rewrite; exit 1 if anything

Where the sections are is read from the Design pages themselves: every heading of
`docs/design/*.md` with an explicit anchor `{#s<number>-<name>}` (`s11-2-velocity-stream`
is §11.2). A citation and the section numbers right after it (`SPEC §2-§4 and §11.3`)
become, in code and other text files, the path of the page and its anchor
(`docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s4-preconditioners and
docs/design/energy-lens.md#s11-3-energy-transformer-block`), and in a docs page a
relative Markdown link (`[design §7](../design/experiments.md#s7-training-recipe)`; the
path form inside code spans and fenced blocks, where a link does not render).

One-shot and idempotent: a rewritten citation holds no "SPEC" any more, so a second run
changes nothing; run it again after merging a branch that added citations. A citation
of a section no Design page has stops the script before it writes anything.
`tests/test_design_citations.py` checks the result.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design"
TREES = ("cem_ablate", "components", "tests", "docs")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".toml", ".cfg"}

SECTION = "\N{SECTION SIGN}"  # written so: this file cites nothing itself
NUMBER = r"(\d+(?:\.\d+)?)"
# "SPEC §2", then any "-§3", ", §4", " and §11.3", " / §5" right after it
CITATION = re.compile(
    "SPEC " + SECTION + NUMBER + r"((?:\s*(?:[-\u2013/,]|,? and|,? or)\s*" + SECTION + r"\d+(?:\.\d+)?)*)"
)
CONTINUATION = re.compile(r"(\s*(?:[-\u2013/,]|,? and|,? or)\s*)" + SECTION + NUMBER)
ANCHOR = re.compile(r"^#{1,6} .*\{#(s(\d+(?:-\d+)?)-[a-z0-9-]+)\}\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def design_sections(design: Path = DESIGN) -> dict[str, tuple[str, str]]:
    """Section number ("11.2") -> (page file name, anchor), from the Design pages' headings."""
    out: dict[str, tuple[str, str]] = {}
    for page in sorted(design.glob("*.md")):
        for line in page.read_text().splitlines():
            match = ANCHOR.match(line)
            if match:
                number = match.group(2).replace("-", ".")
                if number in out:
                    raise SystemExit(
                        f"error: section {SECTION}{number} has two anchors: {out[number]} and "
                        f"{(page.name, match.group(1))}"
                    )
                out[number] = (page.name, match.group(1))
    return out


class UnknownSection(Exception):
    pass


def _target(sections, number: str) -> tuple[str, str]:
    if number not in sections:
        raise UnknownSection(number)
    return sections[number]


def code_form(match: re.Match, sections) -> str:
    """`docs/design/<page>#<anchor>` for each section cited; a range's dash becomes "to"."""

    def path(number: str) -> str:
        page, anchor = _target(sections, number)
        return f"docs/design/{page}#{anchor}"

    out = path(match.group(1))
    for sep, number in CONTINUATION.findall(match.group(2)):
        out += (" to " if sep.strip() in ("-", "\u2013") else sep) + path(number)
    return out


def link_form(match: re.Match, sections, page_dir: Path) -> str:
    """`[design §n](relative/path.md#anchor)` for the first section, `[§m](...)` for the rest."""

    def link(label: str, number: str) -> str:
        page, anchor = _target(sections, number)
        rel = Path(os.path.relpath(DESIGN / page, page_dir)).as_posix()
        return f"[{label}]({rel}#{anchor})"

    out = link(f"design {SECTION}{match.group(1)}", match.group(1))
    for sep, number in CONTINUATION.findall(match.group(2)):
        out += (" to " if sep.strip() in ("-", "\u2013") else sep) + link(f"{SECTION}{number}", number)
    return out


def rewrite_markdown(text: str, sections, page_dir: Path) -> str:
    lines, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        if fenced or FENCE.match(line):
            lines.append(CITATION.sub(lambda m: code_form(m, sections), line))
            continue
        out, last = [], 0
        for match in CITATION.finditer(line):
            in_code_span = line[: match.start()].count("`") % 2 == 1
            out.append(line[last : match.start()])
            out.append(code_form(match, sections) if in_code_span else link_form(match, sections, page_dir))
            last = match.end()
        lines.append("".join(out) + line[last:])
    return "\n".join(lines)


def rewrite(path: Path, sections) -> str:
    text = path.read_text()
    if "SPEC " + SECTION not in text:
        return text
    if path.suffix == ".md" and DESIGN.parent in path.resolve().parents:
        return rewrite_markdown(text, sections, path.resolve().parent)
    return CITATION.sub(lambda m: code_form(m, sections), text)


def files(root: Path = REPO):
    for tree in TREES:
        for path in sorted((root / tree).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    args = parser.parse_args(argv)
    sections = design_sections()
    if not sections:
        print(f"error: no section anchors ({{#s<number>-<name>}}) in {DESIGN.relative_to(REPO)}/*.md", file=sys.stderr)
        return 2
    changed: dict[Path, str] = {}
    unknown: list[str] = []
    for path in files():
        try:
            new = rewrite(path, sections)
        except UnknownSection as e:
            unknown.append(f"{path.relative_to(REPO)}: {SECTION}{e}")
            continue
        if new != path.read_text():
            changed[path] = new
    if unknown:
        print(
            "error: cited sections no Design page has (add the section, or fix the citation):\n  "
            + "\n  ".join(unknown),
            file=sys.stderr,
        )
        return 2
    for path, new in changed.items():
        if not args.check:
            path.write_text(new)
        print(path.relative_to(REPO))
    verb = "would rewrite" if args.check else "rewrote"
    print(f"{verb} the citations of {len(changed)} files", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
