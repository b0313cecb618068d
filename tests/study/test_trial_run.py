"""Fencing: an attempt whose claim was failed as stale writes nothing more.

Real engine, real SQLite Optuna storage, real MLflow store. A claimed trial trains;
once it has written a checkpoint its claim is failed as stale, exactly as another
worker's `fail_stale_trials` would after the grace period. The attempt must stop at
its next write and leave everything as it was at that moment; the slot's retry then
takes the folder over, resumes the verified checkpoint and finishes.
"""

import threading
import time

import yaml

from optuna.trial import TrialState

from cem_ablate.cli.study_command import load_expanded
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.session import StudySession, StudySettings
from cem_ablate.study.storage import StorageSettings
from cem_ablate.study.trial_run import run_trial
from cem_ablate.study.trials import worker_identity
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.store import make_client
from cem_ablate.training.checkpoints import CheckpointFiles
from tests.study.tiny_study import write_study
from cem_ablate.study.optuna_storage import trial_id_of


def _frozen(trials, trial_id):
    t = trials.storage.get_trial(trial_id)
    return t.state, t.value, dict(t.user_attrs), dict(t.intermediate_values), t.params


def test_a_fenced_attempt_writes_nothing_and_the_retry_resumes_its_checkpoint(tmp_path, corpus):
    path = write_study(tmp_path, name="fenced", grid=[2e-3], max_steps=300, corpus=corpus,
                       variants=[{"name": "llama"}], baselines={})
    mapping = yaml.safe_load(path.read_text())
    mapping["base"]["train"].update(ckpt_every_n_steps=10, val_every_n_steps=100)
    path.write_text(yaml.safe_dump(mapping))
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings = StudySettings(StorageSettings(f"sqlite:///{tmp_path / 'optuna.db'}", 10, 60), tracking,
                             tmp_path / "work", threads=1, progress=False)
    session = StudySession(load_expanded(str(path), None, []), settings)
    session.prepare(echo=lambda *_: None)
    (variant,) = session.variants
    trials = session.trials[variant.key]
    trial = trials.claim(worker_identity())
    seen = {}

    def fail_after_a_checkpoint():
        # what another worker does to a claim whose heartbeat is older than the grace period
        while not list((tmp_path / "work").rglob("digests.json")):
            time.sleep(0.02)
        trials.storage.set_trial_state_values(trial_id_of(trial), TrialState.FAIL)
        seen["trial"] = _frozen(trials, trial_id_of(trial))
        seen["digests"] = next((tmp_path / "work").rglob("digests.json")).read_text()

    failer = threading.Thread(target=fail_after_a_checkpoint)
    failer.start()
    record = run_trial(session, variant, trial)
    failer.join()

    assert record.status == TrialStatus.KILLED and "claim lost" in record.reason
    run_dir = next((tmp_path / "work").rglob("digests.json")).parents[1]
    assert not (run_dir / "result.json").exists()
    # at most the checkpoint in flight when the claim died (it passed its check before)
    checkpoints = CheckpointFiles(run_dir / "checkpoints")
    fenced_step = _step(checkpoints)
    assert fenced_step < 300 and checkpoints.verified(warn=False) == checkpoints.last
    assert _frozen(trials, trial_id_of(trial)) == seen["trial"]  # Optuna untouched after the fence
    client = make_client(tracking)
    child = client.get_run(record.run_id)
    assert T.STATUS not in child.data.tags  # no outcome written for the fenced attempt
    fenced_points = [m.step for m in client.get_metric_history(record.run_id, "train_loss")]
    assert max(fenced_points) < 300

    # The retry (attempt 2) takes the folder over and resumes the fenced attempt's checkpoint.
    trials.reconcile()
    retry = trials.claim(worker_identity())
    assert retry is not None and retry.number != trial.number
    finished = run_trial(session, variant, retry)
    assert finished.status == TrialStatus.FINISHED and finished.run_id == record.run_id
    assert (run_dir / "lease").read_text().strip() == f"{trials.study.study_name}#{retry.number}"
    assert _step(checkpoints) == 300
    steps = [m.step for m in client.get_metric_history(record.run_id, "train_loss")]
    # resumed from the fenced attempt's checkpoint, not restarted: (300 - c) / 2 more points
    assert max(steps) == 299 and len(steps) == len(fenced_points) + (300 - fenced_step) // 2
    assert _frozen(trials, trial_id_of(trial)) == seen["trial"]


def _step(checkpoints):
    import torch

    return torch.load(checkpoints.verified(warn=False), weights_only=False)["global_step"]
