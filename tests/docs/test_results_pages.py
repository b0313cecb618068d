"""The results pages' generated blocks (scripts/results_pages.py): every block on
docs/results/ is what its committed data generates, and a changed data value shows up."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.analysis.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pages():
    return load_script("results_pages")


def test_every_results_page_is_what_its_data_generates(pages):
    stale = pages.stale(ROOT)
    assert not stale, f"stale results pages (run python scripts/results_pages.py): {sorted(p.name for p in stale)}"


def test_every_results_page_with_numbers_has_generated_blocks(pages):
    marked = {p.name for p in (ROOT / "docs" / "results").glob("*.md") if pages.BLOCK.search(p.read_text("utf-8"))}
    assert {"pooled-variance.md"} <= marked


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs" / "results", root / "docs" / "results")
    (root / "docs" / "figures").mkdir(parents=True)
    for csv in (ROOT / "docs" / "figures").glob("cpu_*_trials.csv"):
        shutil.copy(csv, root / "docs" / "figures" / csv.name)
    return root


def test_editing_one_csv_value_makes_the_check_fail(pages, tmp_path):
    root = _copy(tmp_path)
    assert not pages.stale(root, "pooled-variance.md")  # the copy is as committed
    csv = root / "docs" / "figures" / "cpu_250_llama_trials.csv"
    lines = csv.read_text().splitlines(keepends=True)
    value = lines[0].split(",").index("value")
    # the file's best trial: one seed of a model at its best rate, which the page's tests read
    best = min(range(1, len(lines)), key=lambda i: float(lines[i].split(",")[value]))
    row = lines[best].split(",")
    row[value] = str(float(row[value]) + 0.05)
    lines[best] = ",".join(row)
    csv.write_text("".join(lines))
    stale = pages.stale(root, "pooled-variance.md")
    assert [p.name for p in stale] == ["pooled-variance.md"]
    assert pages.main(["--check", "--root", str(root), "--pages", "pooled-variance.md"]) == 1  # what CI runs


def test_a_block_without_a_generator_is_refused_by_name(pages):
    text = ("<!-- generated: nowhere/table (python scripts/results_pages.py) -->\nold\n"
            "<!-- end generated: nowhere/table -->\n")
    with pytest.raises(KeyError, match="nowhere/table"):
        pages.render(text, ROOT)


def test_an_edited_block_is_rewritten_and_the_text_around_it_kept(pages):
    page = (ROOT / "docs" / "results" / "pooled-variance.md").read_text("utf-8")
    edited = page.replace("| recipes (models each) |", "| recipes (hand-edited) |")
    assert edited != page
    assert pages.render(edited, ROOT) == page
