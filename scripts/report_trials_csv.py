"""The trials of a written report (`cem-ablate report ... --out DIR`: DIR/report.md), one CSV row
each, in scripts/store_trials_csv.py's columns: for a store that is gone.

The CPU width studies of 2026-11-26 (docs/lab-notes/results-log.md section 18, the code of commit 217a9b8) ran
in a store lost with that machine; their reports' "Trials" tables kept every trial (learning
rate as printed, 3 significant digits, which is how the study files write their grids; test
perplexity to 6). scripts/mup_width_csv_report.py pools such CSVs with live stores' by (variant,
seed, lr), so a later store's d 256 trials join the d 32-128 ones in one table.

    python scripts/report_trials_csv.py docs/figures/mup_width_cpu_*/report.md > trials.csv
"""

from __future__ import annotations

import csv
import re
import sys

from store_trials_csv import COLUMNS

STUDY = re.compile(r"^# Study `([^`]+)`")


def report_rows(text: str) -> list[list]:
    """The CSV rows of one report.md's "## Trials" table (no header)."""
    lines = text.splitlines()
    match = STUDY.match(lines[0]) if lines else None
    if match is None:
        raise ValueError("not a cem-ablate report: its first line is not '# Study `NAME`'")
    study = match.group(1)
    try:
        start = lines.index("## Trials")
    except ValueError as err:
        raise ValueError(f"report of {study} has no '## Trials' section") from err
    header = [c.strip() for c in lines[start + 2].strip("|").split("|")]
    if header[:4] != ["variant", "lr", "seed", "status"]:
        raise ValueError(f"report of {study}: unexpected trials header {header}")
    rows = []
    for line in lines[start + 4 :]:
        if not line.startswith("|"):
            break
        variant, lr, seed, status, value, reason = [c.strip() for c in line.strip().strip("|").split("|")][:6]
        finished = status == "finished"  # only these carry a finite objective (the report prints "-" else)
        rows.append(
            [
                f"{study}/{variant}",
                variant,
                float(lr),
                int(seed),
                "COMPLETE" if finished else status.upper(),
                status,
                float(value) if finished else "",
                "",
                "",
                reason,
            ]
        )
    return rows


def main(paths: list[str], out) -> int:
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    n = 0
    for path in paths:
        for row in report_rows(open(path, encoding="utf-8").read()):
            writer.writerow(row)
            n += 1
    return n


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/report_trials_csv.py REPORT.md [REPORT.md ...] > trials.csv")
    main(sys.argv[1:], sys.stdout)
