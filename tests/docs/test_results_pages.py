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
    assert {
        "pooled-variance.md",
        "forecast.md",
        "index.md",
        "figure-2.md",
        "figure-3.md",
        "figure-4.md",
        "table-3-gp.md",
        "step-scaling.md",
        "serving-cost.md",
        "transfer.md",
        "readings.md",
        "width.md",
        "readout.md",
        "energy-lens.md",
    } <= marked


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


@pytest.mark.soak  # in CI: the rule's own tests below and the CSV edit above (this one renders the index twice)
def test_a_changed_report_changes_the_verdict_word_the_index_prints(pages, tmp_path):
    root = _copy(tmp_path)
    for report in (ROOT / "docs" / "figures").glob("*/report.md"):
        (root / report.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(report, root / report.relative_to(ROOT))
    assert not pages.stale(root, "index.md")
    report = root / "docs" / "figures" / "fig3a_full_cem_lr_cpu" / "report.md"
    text = report.read_text("utf-8")
    assert "| +2.249 [+1.65, +2.85] | Welch t |" in text
    report.write_text(text.replace("| +2.249 [+1.65, +2.85] | Welch t |", "| -2.249 [-2.85, -1.65] | Welch t |"))
    ((old, new),) = pages.stale(root, "index.md").values()
    row = "| full CEM is slightly better than Llama at its optimal learning rate (Fig. 3a) | full CEM − Llama |"
    assert "contradicted" in next(line for line in old.splitlines() if line.startswith(row))
    assert "reproduced" in next(line for line in new.splitlines() if line.startswith(row))


def test_a_block_without_a_generator_is_refused_by_name(pages):
    text = (
        "<!-- generated: nowhere/table (python scripts/results_pages.py) -->\nold\n"
        "<!-- end generated: nowhere/table -->\n"
    )
    with pytest.raises(KeyError, match="nowhere/table"):
        pages.render(text, ROOT)


def test_an_edited_block_is_rewritten_and_the_text_around_it_kept(pages):
    page = (ROOT / "docs" / "results" / "pooled-variance.md").read_text("utf-8")
    edited = page.replace("| recipes (models each) |", "| recipes (hand-edited) |")
    assert edited != page
    assert pages.render(edited, ROOT) == page


def test_no_verdict_word_is_written_by_hand_outside_the_pages_that_define_the_rule(pages):
    import re

    for page in (ROOT / "docs" / "results").glob("*.md"):
        if page.name in {"index.md", "methods.md"}:  # the rule's own definitions
            continue
        outside = pages.BLOCK.sub("", page.read_text("utf-8"))
        words = re.findall(r"(?i)\b(?:not reproduced|reproduced|contradicted)\b", outside)
        assert not words, (page.name, words)


@pytest.mark.parametrize(
    "expects, low, high, p, word",
    [
        ("lower", -2.0, -1.0, 0.01, "reproduced"),
        ("lower", 1.0, 2.0, 0.01, "contradicted"),
        ("lower", -2.0, -1.0, 0.2, "unresolved"),  # the interval alone is not the stated test
        ("lower", -1.0, 1.0, 0.01, "unresolved"),
        ("higher", 1.0, 2.0, 0.04, "reproduced"),
        ("higher", -2.0, -1.0, 0.04, "contradicted"),
        ("not_lower", 1.0, 2.0, 0.01, "reproduced"),  # no gain: a resolved loss agrees
        ("not_lower", -2.0, -1.0, 0.01, "contradicted"),
        ("not_lower", -0.5, 0.7, 0.6, "unresolved"),
        ("equal", -0.1, 0.2, 0.3, "unresolved"),  # no margin: equivalence cannot be shown
        ("equal", 0.5, 0.7, 0.001, "unresolved"),
    ],
)
def test_one_rule_words_every_contrast(pages, expects, low, high, p, word):
    e = pages.Evidence((low + high) / 2, low, high, 95.0, "t", p, False)
    assert pages.claim_verdict(expects, e) == word


def test_equivalence_is_decided_only_against_a_margin(pages):
    e = pages.Evidence(0.05, -0.1, 0.2, 95.0, "t", 0.5, False)
    assert pages.claim_verdict("equal", e, margin=0.5) == "reproduced"
    assert (
        pages.claim_verdict("equal", pages.Evidence(1.0, 0.8, 1.2, 95.0, "t", 0.001, False), margin=0.5)
        == "contradicted"
    )
    with pytest.raises(ValueError, match="expects"):
        pages.claim_verdict("similar", e)


def test_a_claims_verdict_over_its_contrasts(pages):
    assert pages.combined_verdict(["unresolved", "contradicted"]) == "contradicted"
    assert pages.combined_verdict(["reproduced", "unresolved"]) == "reproduced"
    assert pages.combined_verdict(["reproduced", "contradicted"]) == "mixed"
    assert pages.combined_verdict(["unresolved", "unresolved"]) == "unresolved"


def test_every_claims_row_names_a_contrast_its_source_holds(pages):
    rows = pages.claims(ROOT)
    assert all(r["evidence"] is not None or r["expects"] == "not_run" for r in rows)
    assert all((ROOT / r["source"]).exists() for r in rows)
