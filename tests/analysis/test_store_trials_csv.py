"""scripts/store_trials_csv.py: every trial of a real Optuna SQLite store, one CSV row each,
with the columns scripts/mup_width_csv_report.py reads."""

from __future__ import annotations

import csv
import io

import optuna

from tests.analysis.scripts import load_script


def test_every_trial_of_every_study_is_one_row(tmp_path):
    module = load_script("store_trials_csv")
    db = tmp_path / "optuna.db"
    storage = f"sqlite:///{db}"
    for name, variant, values in (("w/d32_llama-k", "d32_llama", [5.5, 5.25]), ("w/d64_llama-k", "d64_llama", [4.5])):
        study = optuna.create_study(study_name=name, storage=storage)
        study.set_user_attr("variant", variant)
        for i, value in enumerate(values):
            trial = study.ask(
                {
                    "lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True),
                    "seed": optuna.distributions.IntDistribution(0, 9),
                }
            )
            trial.set_user_attr("trial_key", f"key{i}")
            trial.set_user_attr("status", "finished")
            study.tell(trial, value)
    failed = optuna.load_study(study_name="w/d64_llama-k", storage=storage)
    trial = failed.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)})
    trial.set_user_attr("reason", "diverged at step 3")
    failed.tell(trial, state=optuna.trial.TrialState.FAIL)

    out = io.StringIO()
    assert module.write_trials(str(db), out) == 4
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert list(rows[0]) == module.COLUMNS
    complete = [r for r in rows if r["state"] == "COMPLETE"]
    assert sorted(float(r["value"]) for r in complete) == [4.5, 5.25, 5.5]
    assert {r["variant"] for r in complete} == {"d32_llama", "d64_llama"}
    assert all(r["trial_key"].startswith("key") and r["lr"] and r["seed"] for r in complete)
    (fail,) = [r for r in rows if r["state"] == "FAIL"]
    assert fail["reason"] == "diverged at step 3" and fail["value"] == ""
