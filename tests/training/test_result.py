"""A run folder's result.json: the status is its stored string, read back as the enum."""

from __future__ import annotations

import json

from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.training.result import TrainResult


def test_a_run_folders_result_json_keeps_the_string_and_reads_back_the_enum():
    text = json.dumps(TrainResult(TrialStatus.DIVERGED, steps=3, diverged_step=3).to_dict())
    assert json.loads(text)["status"] == "diverged"
    assert TrainResult.from_dict(json.loads(text)).status is TrialStatus.DIVERGED
    old = {"status": "finished", "steps": 10, "test_ppl": 12.5}  # a result.json as older code wrote it
    assert TrainResult.from_dict(old).status is TrialStatus.FINISHED
