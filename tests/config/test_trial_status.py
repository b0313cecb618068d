"""The trial status's stored strings are a file format: Optuna user attributes, MLflow
tags and run folders' result.json hold them (tests/training/test_result.py,
tests/study/test_trials.py), so a renamed value must fail here, not
silently turn every old trial into an unreadable (or "killed") one."""

from __future__ import annotations

import json

import pytest

from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import TrialStatus

STORED = {  # what stores written since the first release hold; never edit a value here
    "FINISHED": "finished",
    "DIVERGED": "diverged",
    "FAILED": "failed",
    "PRUNED": "pruned",
    "KILLED": "killed",
    "DUPLICATE": "duplicate",
    "RUNNING": "running",
    "WAITING": "waiting",
    "MISSING": "missing",
}


def test_every_status_keeps_its_stored_string():
    assert {s.name: s.value for s in TrialStatus} == STORED


@pytest.mark.parametrize("stored", sorted(STORED.values()))
def test_a_stored_status_reads_back_and_writes_the_same_string(stored):
    status = TrialStatus.read(stored)
    assert status.name == stored.upper()
    # written back as the plain string, however it is written
    assert (str(status), f"{status}", json.dumps(status)) == (stored, stored, json.dumps(stored))


def test_an_absent_status_takes_the_default_and_an_unknown_one_is_named():
    assert TrialStatus.read(None, default=TrialStatus.RUNNING) is TrialStatus.RUNNING
    with pytest.raises(ValueError, match="'finised'"):
        TrialStatus.read("finised")


def test_a_record_holds_the_enum_whatever_string_it_was_built_from():
    record = TrialRecord(1e-3, 0, "finished", 10.0, study="s/v", number=4)
    assert record.status is TrialStatus.FINISHED and record.reference == "s/v#4"
    assert TrialRecord(1e-3, 0, "diverged", reused_from="other/v#2").reference == "other/v#2"
    with pytest.raises(ValueError):
        TrialRecord(1e-3, 0, "finised")
