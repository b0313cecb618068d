"""Fencing: an attempt whose claim was failed as stale writes nothing more.

Real engine, real SQLite Optuna storage, real MLflow store. A claimed trial trains;
once it has written a checkpoint its claim is failed as stale, exactly as another
worker's `fail_stale_trials` would after the grace period. The attempt must stop at
its next write and leave everything as it was at that moment; the slot's retry then
takes the folder over, resumes the verified checkpoint and finishes.

The fence lands at a step the test names (a Lightning callback in the attempt's own
trainer), not wherever a polling thread finds the run: under load a poller woke up
after the run had ended.
"""

import signal

import yaml
from lightning.pytorch import Callback
from optuna.trial import TrialState

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.ledger import trial_facts
from cem_ablate.study.optuna_storage import trial_id_of
from cem_ablate.study.trial_run import run_trial
from cem_ablate.study.trials import worker_identity
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.store import make_client
from cem_ablate.training.checkpoints import CheckpointFiles
from cem_ablate.training.preemption import STOP
from tests.study.tiny_study import prepared_session, write_study


def _frozen(trials, trial_id):
    t = trials.storage.get_trial(trial_id)
    return t.state, t.value, dict(t.user_attrs), dict(t.intermediate_values), t.params


class FailClaimBeforeStep(Callback):
    """Before optimizer step `step + 1` trains (the checkpoint of `step` saved at the end
    of the batch before), fail the claim: what another worker does to a claim whose
    heartbeat is older than the grace period."""

    def __init__(self, step: int, fail_claim):
        self.step, self.fail_claim, self.fired_at = step, fail_claim, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.fired_at is None and trainer.global_step == self.step:
            self.fired_at = trainer.global_step
            self.fail_claim()


STEPS, FENCE_STEP = 120, 50  # the fence at a checkpoint step (ckpt_every_n_steps=10) well before the end


def test_a_fenced_attempt_writes_nothing_and_the_retry_resumes_its_checkpoint(tmp_path, corpus):
    path = write_study(
        tmp_path, name="fenced", grid=[2e-3], max_steps=STEPS, corpus=corpus, variants=[{"name": "llama"}], baselines={}
    )
    mapping = yaml.safe_load(path.read_text())
    mapping["base"]["train"].update(ckpt_every_n_steps=10, val_every_n_steps=100)
    path.write_text(yaml.safe_dump(mapping))
    session, tracking = prepared_session(tmp_path, path)
    (variant,) = session.variants
    trials = session.trials[variant.key]
    trial = trials.claim(worker_identity())
    seen = {}

    def fail_claim():
        trials.storage.set_trial_state_values(trial_id_of(trial), TrialState.FAIL)
        seen["trial"] = _frozen(trials, trial_id_of(trial))
        seen["digests"] = next((tmp_path / "work").rglob("digests.json")).read_text()

    fence = FailClaimBeforeStep(FENCE_STEP, fail_claim)
    record = run_trial(session, variant, trial, extra_callbacks=[fence])

    assert fence.fired_at == FENCE_STEP
    assert record.status == TrialStatus.KILLED and "claim lost" in record.reason
    run_dir = next((tmp_path / "work").rglob("digests.json")).parents[1]
    assert not (run_dir / "result.json").exists()
    # the checkpoint of the fence's step is the last: none written after the fence
    checkpoints = CheckpointFiles(run_dir / "checkpoints")
    fenced_step = _step(checkpoints)
    assert fenced_step == FENCE_STEP and checkpoints.verified(warn=False) == checkpoints.last
    assert (run_dir / "checkpoints" / "digests.json").read_text() == seen["digests"]
    assert _frozen(trials, trial_id_of(trial)) == seen["trial"]  # Optuna untouched after the fence
    client = make_client(tracking)
    child = client.get_run(record.run_id)
    assert T.STATUS not in child.data.tags  # no outcome written for the fenced attempt
    fenced_points = [m.step for m in client.get_metric_history(record.run_id, "train_loss")]
    assert max(fenced_points) < FENCE_STEP  # no curve point past the fence

    # The retry (attempt 2) takes the folder over and resumes the fenced attempt's checkpoint.
    trials.reconcile()
    retry = trials.claim(worker_identity())
    assert retry is not None and retry.number != trial.number
    finished = run_trial(session, variant, retry)
    assert finished.status == TrialStatus.FINISHED and finished.run_id == record.run_id
    assert (run_dir / "lease").read_text().strip() == f"{trials.study.study_name}#{retry.number}"
    assert _step(checkpoints) == STEPS
    steps = [m.step for m in client.get_metric_history(record.run_id, "train_loss")]
    # resumed from the fenced attempt's checkpoint, not restarted: (STEPS - c) / 2 more points
    assert max(steps) == STEPS - 1 and len(steps) == len(fenced_points) + (STEPS - fenced_step) // 2
    assert _frozen(trials, trial_id_of(trial)) == seen["trial"]


def _step(checkpoints):
    import torch

    return torch.load(checkpoints.verified(warn=False), weights_only=False)["global_step"]


class SignalAfterStep(Callback):
    """After optimizer step `step`, record a SIGTERM as the process's handler does when a
    cluster takes the job back (training.preemption.STOP); the real stop follows: the
    step boundary, the verified checkpoint, `Preempted`."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step and STOP.signum is None:
            STOP.signum = signal.SIGTERM


def test_a_preempted_attempt_takes_the_one_failure_path_and_the_claim_resumes_it(tmp_path, corpus):
    """Preemption as an outcome: its cause (config.trial_outcome) recorded in the ledger with
    the trial queued again at once, the child run ended KILLED without an outcome, and the next
    claim resumes the checkpoint and finishes with cause `finished` in the ledger and MLflow."""
    path = write_study(
        tmp_path, name="preempted", grid=[2e-3], max_steps=40, corpus=corpus, variants=[{"name": "llama"}], baselines={}
    )
    session, tracking = prepared_session(tmp_path, path)
    (variant,) = session.variants
    trials = session.trials[variant.key]
    trial = trials.claim(worker_identity())
    try:
        record = run_trial(session, variant, trial, extra_callbacks=[SignalAfterStep(12)])
    finally:
        STOP.clear()

    assert record.status == TrialStatus.WAITING and record.reason.startswith("preempted by SIGTERM at step ")
    assert record.cause == Cause.PREEMPTED
    (queued,) = trials.points()
    assert queued.status == TrialStatus.WAITING and queued.cause == Cause.PREEMPTED
    assert trial_facts(trials.storage.get_trial(trial_id_of(trial))).reason == record.reason  # the ledger's line
    client = make_client(tracking)
    child = client.get_run(record.run_id)
    assert child.info.status == "KILLED" and T.STATUS not in child.data.tags and T.CAUSE not in child.data.tags

    resumed = run_trial(session, variant, trials.claim(worker_identity()))
    assert resumed.status == TrialStatus.FINISHED and resumed.run_id == record.run_id
    (done,) = trials.points()
    assert done.cause == Cause.FINISHED
    assert client.get_run(record.run_id).data.tags[T.CAUSE] == "finished"
