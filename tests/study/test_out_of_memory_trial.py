"""A study trial that runs out of device memory: recorded with its numbers, the study goes on,
the report lists it (training/out_of_memory.py). The error is injected as CUDA raises it,
from inside the trial's own training step; real engine, Optuna and MLflow stores."""

from __future__ import annotations

from cem_ablate.cli.main import main
from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.trial_run import run_trial
from cem_ablate.study.trials import worker_identity
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.store import make_client
from cem_ablate.training.out_of_memory import OUT_OF_MEMORY
from tests.study.tiny_study import prepared_session, write_study
from tests.training.test_out_of_memory import OutOfMemoryAt


def test_an_out_of_memory_trial_is_recorded_the_next_trains_and_the_report_lists_it(tmp_path, corpus, capsys):
    path = write_study(
        tmp_path,
        name="oomstudy",
        grid=[1e-3, 4e-3],
        max_steps=4,
        corpus=corpus,
        variants=[{"name": "llama"}],
        baselines={},
    )
    session, tracking = prepared_session(tmp_path, path)
    (variant,) = session.variants
    trials = session.trials[variant.key]

    first = run_trial(session, variant, trials.claim(worker_identity()), extra_callbacks=[OutOfMemoryAt(1)])
    assert first.status == TrialStatus.FAILED and first.cause == Cause.OUT_OF_MEMORY
    assert first.reason.startswith(f"{OUT_OF_MEMORY}: the step asked for 1.50 GiB more;"), first.reason
    second = run_trial(session, variant, trials.claim(worker_identity()))
    assert second.status == TrialStatus.FINISHED  # the study went on

    client = make_client(tracking)
    tags = client.get_run(first.run_id).data.tags
    assert tags[T.STATUS] == "failed" and OUT_OF_MEMORY in str(tags)
    # One outcome, carried unchanged: the ledger, the MLflow child and the report hold one cause.
    (ledger,) = [t for t in trials.points() if t.run_id == first.run_id]
    assert ledger.cause == Cause.OUT_OF_MEMORY and ledger.reason == first.reason
    assert tags[T.CAUSE] == "out_of_memory" and tags[T.REASON] == first.reason
    out = tmp_path / "report"
    assert main(["report", str(path), "--tracking-uri", tracking, "--out", str(out)]) == 0
    capsys.readouterr()
    report = (out / "report.md").read_text()
    assert "1 failed" in report  # the variant's status line
    row = next(line for line in report.splitlines() if OUT_OF_MEMORY in line)  # the trials table
    assert "failed" in row and "1.50 GiB" in row and row.endswith("| out_of_memory |"), row
