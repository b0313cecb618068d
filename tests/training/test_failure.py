"""One failure path: each kind of exception is one cause (training.failure), each cause has
one meaning (config.trial_outcome.MEANINGS), and the design page's table says the same."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest
import torch

from cem_ablate.config.errors import ConfigError
from cem_ablate.config.trial_outcome import MEANINGS, Cause, TrialOutcome
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.tracking.store import TrackingServerLost
from cem_ablate.training.failure import failure_of
from cem_ablate.training.lease import LeaseLost
from cem_ablate.training.preemption import Preempted
from cem_ablate.training.result import TrainResult

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design" / "experiments.md"


def _full_disk(tmp_path: Path) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "last.ckpt"))


@pytest.mark.parametrize(
    ("make", "cause"),
    [
        (lambda p: Preempted("SIGTERM", 7), Cause.PREEMPTED),
        (lambda p: LeaseLost("the claim s#3 is no longer live"), Cause.CLAIM_LOST),
        (lambda p: KeyboardInterrupt(), Cause.INTERRUPTED),
        (lambda p: _full_disk(p), Cause.DISK_FULL),
        (lambda p: _wrapped(_full_disk(p)), Cause.DISK_FULL),
        (lambda p: TrackingServerLost("http://127.0.0.1:1", 10, "Max retries exceeded"), Cause.SERVER_LOST),
        (lambda p: ConfigError("train.lr", "must be positive"), Cause.BAD_INPUT),
        (lambda p: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB"), Cause.OUT_OF_MEMORY),
        (lambda p: ValueError("shapes do not match"), Cause.ERROR),
    ],
)
def test_each_kind_of_exception_is_one_cause(tmp_path, make, cause):
    failure = failure_of(make(tmp_path), [tmp_path], "http://127.0.0.1:1")
    assert failure.cause == cause
    assert failure.outcome.reason  # every cause says itself in one line
    assert "\n" not in failure.outcome.reason


def _wrapped(err: BaseException) -> RuntimeError:
    try:
        try:
            raise err
        except OSError as inner:
            raise RuntimeError("checkpoint save failed") from inner
    except RuntimeError as outer:
        return outer


def test_a_lost_server_becomes_its_one_line_and_the_error_to_raise():
    err = ConnectionError("HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url")
    failure = failure_of(err, [], "http://127.0.0.1:1")
    assert failure.cause == Cause.SERVER_LOST and isinstance(failure.error, TrackingServerLost)
    assert failure_of(err, [], "sqlite:///x.db").cause == Cause.ERROR  # a local store has no server to lose


def test_every_cause_has_one_meaning_and_stops_exit_as_the_table_says():
    assert set(MEANINGS) == set(Cause)
    for cause, meaning in MEANINGS.items():
        assert meaning.retried in ("never", "next invocation", "now", "elsewhere"), cause
        assert not (meaning.run_result and meaning.stops_process), cause  # a result never stops the study
        assert (meaning.exit_status == 0) == (
            meaning.status in (TrialStatus.FINISHED, TrialStatus.DIVERGED, TrialStatus.PRUNED)
        ), cause
    one_line = {c for c, m in MEANINGS.items() if m.says_one_line}
    assert one_line == {Cause.BAD_INPUT, Cause.DISK_FULL, Cause.SERVER_LOST}
    assert TrialOutcome(Cause.OUT_OF_MEMORY, "x").status == TrialStatus.FAILED


def test_the_design_page_table_says_what_the_code_does():
    text = DESIGN.read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text, re.M))
    assert set(rows) == {c.value for c in Cause}, "docs/design/experiments.md §8.1 lists every cause once"
    for cause, meaning in MEANINGS.items():
        assert re.split(r"[,(]", rows[cause.value])[0].strip() == meaning.status.value, cause
    for line in re.findall(r"^\| `\w+` \|.*$", text, re.M):
        cells = [c.strip() for c in line.strip("|").split("|")]
        meaning = MEANINGS[Cause(cells[0].strip("`"))]
        assert cells[3] == meaning.retried, line
        assert ("exit" in cells[4]) == meaning.stops_process or cells[0] == "`bad_input`", line


def test_a_result_written_before_causes_reads_as_its_status_usual_cause():
    assert TrainResult.from_dict({"status": "finished"}).cause == Cause.FINISHED
    assert TrainResult.from_dict({"status": "diverged"}).cause == Cause.NOT_FINITE
    assert TrainResult.from_dict({"status": "failed", "error": "x"}).cause == Cause.ERROR
    oom = TrainResult(TrialStatus.FAILED, error="out of device memory", cause=Cause.OUT_OF_MEMORY)
    assert TrainResult.from_dict(oom.to_dict()).cause == Cause.OUT_OF_MEMORY
