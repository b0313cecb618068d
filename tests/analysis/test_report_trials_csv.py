"""scripts/report_trials_csv.py: a written report's "Trials" table back to trial rows, checked
against the same report's own lr* table (the report computed that table from the trials it
lists, so the rows must reproduce it through the report's estimators)."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from cem_ablate.analysis.statistics import Observation, variant_stats
from tests.analysis.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "docs" / "figures" / "mup_width_cpu_first" / "report.md"


@pytest.fixture(scope="module")
def module():
    return load_script("report_trials_csv")


def test_the_rows_reproduce_the_reports_own_optima(module):
    text = REPORT.read_text(encoding="utf-8")
    out = io.StringIO()
    assert module.main([str(REPORT)], out) == 126
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert {r["study"].split("/")[0] for r in rows} == {"mup_width_cpu_d32_128_first"}
    printed = dict(re.findall(r"^\| (d\d+_\w+?)(?: \(baseline\))? \| [\d,]+ \| 3 \| ([\d.e-]+) \[", text, re.M))
    assert len(printed) == 6
    for variant, lr_star in printed.items():
        obs = [Observation(float(r["lr"]), int(r["seed"]), float(r["value"])) for r in rows if r["variant"] == variant]
        assert len(obs) == 21
        assert f"{variant_stats(obs).optimum.lr_star:.3g}" == lr_star


def test_a_trial_that_did_not_finish_has_no_value_and_other_files_are_refused(module):
    report = "\n".join(
        [
            "# Study `s`",
            "",
            "## Trials",
            "",
            "| variant | lr | seed | status | test perplexity | reason |",
            "|---|---|---|---|---|---|",
            "| a | 0.001 | 0 | finished | 5.5 |  |",
            "| a | 0.002 | 0 | diverged | - | non-finite loss at step 3 |",
            "",
            "## Figures",
        ]
    )
    rows = module.report_rows(report)
    assert [(r[4], r[6]) for r in rows] == [("COMPLETE", 5.5), ("DIVERGED", "")]
    assert rows[1][-1] == "non-finite loss at step 3"
    with pytest.raises(ValueError, match="not a cem-ablate report"):
        module.report_rows("# something else")
    with pytest.raises(ValueError, match="no '## Trials'"):
        module.report_rows("# Study `s`\n\nno trials")
