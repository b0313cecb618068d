"""The code carries reasons, not history: no issue-number citations in the code or tests.

A comment, docstring or test says what it checks and why, citing a Design section where
the reason is the design ("docs/design/energy-lens.md#s11-2-velocity-stream"); a tracker
number tells a newcomer nothing and goes stale. This is the same check as

    grep -rnE "[Ii]ssue ?#?<digits>" cem_ablate components tests

(the digits class written out in the regex below), over every text file under those
folders; caches and binary files are skipped. The regex is assembled from pieces so that
this file does not match itself.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("cem_ablate", "components", "tests")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
CITATION = re.compile("[Ii]" + "ssue" + " ?#?" + "[0-9]+")


def _text_files(folder: Path):
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(folder).parts):
            data = path.read_bytes()
            if b"\0" in data:
                continue  # binary, as grep would only say "binary file matches"
            try:
                yield path, data.decode("utf-8")
            except UnicodeDecodeError:
                continue


def issue_citations(root: Path = ROOT) -> list[str]:
    """`path:line: text` for every line that cites an issue number."""
    hits = []
    for folder in FOLDERS:
        for path, text in _text_files(root / folder):
            for number, line in enumerate(text.splitlines(), start=1):
                if CITATION.search(line):
                    hits.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return hits


def test_the_pattern_is_the_greps_and_misses_this_file():
    assert CITATION.search("see " + "issue" + " 27") and CITATION.search("Issue" + "#31")
    assert CITATION.search("issue" + "27") and not CITATION.search("the issue's bar")
    assert not CITATION.search(Path(__file__).read_text())


def test_a_citation_is_reported_with_its_file_and_line(tmp_path):
    package = tmp_path / "components"
    (package / "__pycache__").mkdir(parents=True)
    (package / "layer.py").write_text('"""A layer."""\n\nx = 1  # see ' + "Issue" + " 20\n")
    (package / "__pycache__" / "layer.pyc").write_bytes(b"\0" + b"issue" + b" 20")
    (package / "notes.md").write_text("fixed in " + "issue" + "#5\n")
    assert issue_citations(tmp_path) == [
        "components/layer.py:3: x = 1  # see " + "Issue" + " 20",
        "components/notes.md:1: fixed in " + "issue" + "#5",
    ]


def test_no_issue_numbers_in_code_or_tests():
    hits = issue_citations()
    assert not hits, "cite the reason (or a design section), not an issue number:\n  " + "\n  ".join(hits)
