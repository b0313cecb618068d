"""Every trial of an Optuna store, one CSV row each: what the reports are computed from.

A device lease starts with a bare store, and a frozen evidence worktree keeps its own, so the
trials of one design can sit in several stores; scripts/mup_width_csv_report.py pools these
CSVs through the report's own estimators.

    python scripts/store_trials_csv.py mlruns/optuna.db > trials.csv
"""

from __future__ import annotations

import csv
import sys

import optuna

COLUMNS = ["study", "variant", "lr", "seed", "state", "status", "value", "seconds", "trial_key", "reason"]


def write_trials(db_path: str, out) -> int:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{db_path}"
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    rows = 0
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        for t in study.trials:
            a = t.user_attrs
            writer.writerow(
                [
                    summary.study_name,
                    study.user_attrs.get("variant", ""),
                    t.params.get("lr"),
                    t.params.get("seed"),
                    t.state.name,
                    a.get("status", ""),
                    t.value,
                    a.get("seconds", ""),
                    a.get("trial_key", ""),
                    str(a.get("reason", ""))[:200],
                ]
            )
            rows += 1
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/store_trials_csv.py OPTUNA_DB > trials.csv")
    write_trials(sys.argv[1], sys.stdout)
