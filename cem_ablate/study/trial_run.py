"""Train one claimed trial through the engine and record what happened, everywhere.

    claimed Optuna trial -> lr, seed -> typed RunConfig (the variant's, at lr and seed)
      -> child MLflow run (found or created by `RunConfig.trial_key()`), its params
      -> train_run(config, run_dir, mlflow_run_id=child, lease) (the engine logs the curves
         into the child, nothing else; the worker keeps the trial's heartbeat)
      -> Optuna: COMPLETE(value) / FAIL(status, reason) / PRUNED
      -> MLflow child: the outcome, written once (tracking.outcome); the parent's fit and
         verdicts are the coordinator's (study.summary.StudyPublisher)

The run folder is fixed per trial key, so a retried trial resumes from the killed
attempt's last verified checkpoint and logs into the same child run.

Fencing: the claim is the Optuna trial, live while it is RUNNING. A worker
that was stopped past the grace period finds, when it wakes up, its trial failed as
stale and the slot retried elsewhere; so every write of an attempt checks the claim
first: its run folder, checkpoints, `result.json` and MLflow curves through the
engine's lease (`training.lease`: the folder names the attempt holding it), system
metrics and the heartbeat likewise, and its Optuna facts and `tell` are refused by
Optuna itself once the trial is finished. A fenced attempt stops at once and writes
nothing more; the worker goes on with the next slot.

Preemption (training.preemption): an attempt stopped by a signal has saved a verified
checkpoint; its trial goes back to WAITING at once (the claim released, no grace
period), its child run is marked KILLED, and its record says at which step it stopped.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optuna.exceptions import UpdateFinishedTrialError

from cem_ablate.config.loading import flatten_dotted
from cem_ablate.config.trial_outcome import Cause, TrialOutcome
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.ledger import trial_facts
from cem_ablate.study.trials import VariantTrials
from cem_ablate.study.variants import Variant
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.run_context import system_metrics
from cem_ablate.training.config import RunConfig
from cem_ablate.training.failure import Failure, failure_of
from cem_ablate.training.lease import Lease, LeaseLost
from cem_ablate.training.result import TrainResult

if TYPE_CHECKING:
    import optuna
    from lightning.pytorch import Callback

    from cem_ablate.study.session_protocols import TrialSession

MAX_SEED = 2**31 - 1  # numpy's and Lightning's seed range


@dataclass(frozen=True)
class Attempt:
    """One claimed trial, set up: what it trains, where it writes, and its claim."""

    variant: Variant
    trial: optuna.Trial  # RUNNING while the claim is live
    trials: VariantTrials
    slot: str
    lr: float
    seed: int
    config: RunConfig
    trial_key: str
    run_dir: Path
    child: str  # the MLflow child run

    @property
    def lease(self) -> Lease:
        return Lease(_claim_name(self.trials, self.trial), lambda: self.trials.is_live(self.trial))

    def check(self) -> None:
        _check_claim(self.trials, self.trial)

    def record(
        self,
        status: TrialStatus,
        value: float | None,
        reason: str,
        seconds: float = 0.0,
        reused_from: str = "",
        trial_key: str | None = None,
        cause: Cause | None = None,
    ) -> TrialRecord:
        return TrialRecord(
            self.lr,
            self.seed,
            status,
            value,
            reason,
            variant=self.variant.name,
            slot=self.slot,
            trial_key=trial_key or self.trial_key,
            study=self.trials.study.study_name,
            number=self.trial.number,
            run_id=self.child,
            seconds=seconds,
            reused_from=reused_from,
            cause=cause,
        )


def outcome_of_result(result: TrainResult, pruned: bool) -> TrialOutcome:
    """The outcome of a run that returned: the engine's own cause, or pruned / not finite."""
    if pruned:
        return TrialOutcome(Cause.PRUNED, "pruned on validation loss")
    if result.status == TrialStatus.DIVERGED:
        return TrialOutcome(Cause.NOT_FINITE, f"loss not finite at step {result.diverged_step}")
    if result.status == TrialStatus.FINISHED:
        value = result.objective
        if value is not None and math.isfinite(value):
            return TrialOutcome(Cause.FINISHED, "", float(value))
        return TrialOutcome(Cause.NOT_FINITE, "final metric is not finite")
    return TrialOutcome(result.cause or Cause.ERROR, result.error or "training failed")


def run_trial(
    session: TrialSession, variant: Variant, trial: optuna.Trial, extra_callbacks: Sequence[Callback] = ()
) -> TrialRecord:
    """Train (or reuse) one claimed trial; its record as this worker saw it end (KILLED
    where the trial was failed as stale meanwhile and nothing was recorded).

    `extra_callbacks` join the engine's trainer after the pruner (as `train_run`'s own
    `extra_callbacks`): an observer of the attempt, or a step at which to act on it.

    Whatever is raised, here or in training, takes one path: `training.failure.failure_of`
    names its cause and `_settle` does what `config.trial_outcome.MEANINGS` says it means."""
    from cem_ablate.study.pruning import pruning_callback

    attempt, began, training_since = None, time.time(), None
    try:
        attempt = begin(session, variant, trial)
        original = session.finished_elsewhere(attempt.trial_key, attempt.trials.study.study_name)
        if original is not None:
            return _reuse(session, attempt, original)
        use_pruner = session.spec.lr_search.pruner != "none"
        pruner = pruning_callback(trial) if use_pruner else None
        training_since = time.time()
        result = train(session, attempt, ([pruner] if pruner else []) + list(extra_callbacks))
        seconds, training_since = time.time() - training_since, None
        pruned = pruner is not None and pruner.pruned_step is not None
        return finish(session, attempt, result, outcome_of_result(result, pruned), seconds)
    except BaseException as err:  # noqa: BLE001  the one failure path: recorded or raised on by _settle
        failure = _trial_failure(err, session, attempt)
        return _settle(session, variant, trial, attempt, failure, began, training_since)


def _trial_failure(err: BaseException, session: TrialSession, attempt: Attempt | None) -> Failure:
    """`failure_of`, with Optuna's refusal of a finished trial's write read as a lost claim
    (the trial was failed as stale and retried elsewhere)."""
    if isinstance(err, UpdateFinishedTrialError):
        return Failure(TrialOutcome(Cause.CLAIM_LOST, f"claim lost: {err}"), err)
    places = [attempt.run_dir] if attempt is not None else []
    return failure_of(err, places, session.settings.tracking_uri)


def _settle(
    session: TrialSession,
    variant: Variant,
    trial: optuna.Trial,
    attempt: Attempt | None,
    failure: Failure,
    began: float,
    training_since: float | None,
) -> TrialRecord:
    """Do what the failure's cause means (config.trial_outcome.MEANINGS): record it as the
    trial's result, queue the trial again, or raise on to the worker's edge."""
    outcome, cause = failure.outcome, failure.cause
    if cause == Cause.CLAIM_LOST:  # the attempt writes nothing more; the trial is another worker's now
        print(
            f"warning: {variant.name} trial {trial.number}: {failure.error}; this worker wrote nothing more for it",
            file=sys.stderr,
            flush=True,
        )
        if attempt is None:
            study = session.trials[variant.key].study.study_name
            return TrialRecord(
                None,
                None,
                outcome.status,
                None,
                outcome.reason,
                variant=variant.name,
                study=study,
                number=trial.number,
                cause=cause,
            )
        return attempt.record(outcome.status, None, outcome.reason, cause=cause)
    if attempt is None:
        raise failure.error
    if cause == Cause.PREEMPTED:  # its checkpoint is saved: queued again now, resumed by the next claim
        release(session, attempt, outcome)
        return attempt.record(outcome.status, None, outcome.reason, time.time() - began, cause=cause)
    if cause == Cause.SERVER_LOST:  # queued again; marking the child would wait out the window again
        release(session, attempt, outcome, mark_child=False)
        raise failure.error from None
    if cause == Cause.INTERRUPTED:  # the slot freed now, not after the grace period
        facts = {"reason": outcome.reason, "cause": cause.value}
        if training_since is not None and attempt.trials.finish(attempt.trial, outcome.status, None, facts):
            session.tracker.mark_killed(attempt.child)
        raise failure.error
    if cause == Cause.DISK_FULL:
        _free_slot(session, attempt, outcome)
        raise failure.error
    if training_since is None:  # an error around training (set-up, evaluation): the worker's edge says it
        raise failure.error
    return finish(session, attempt, None, outcome, time.time() - training_since)


def begin(session: TrialSession, variant: Variant, trial: optuna.Trial) -> Attempt:
    """The claimed trial's config, child run and facts (each write checks the claim)."""
    spec, trials = session.spec, session.trials[variant.key]
    low, high = spec.lr_search.lr_range
    lr = trial.suggest_float("lr", low, high, log=True)
    # An int range, not the seed list as categorical choices: Optuna refuses a changed
    # choice list for a stored parameter, so adding a seed to a study file (rerunning
    # it on the same storage to train only the new seed) would fail.
    seed = trial.suggest_int("seed", 0, MAX_SEED)
    slot = trial_facts(trial).slot
    cfg = variant.run_config(lr, seed, name=f"{spec.name}.{variant.key}.{slot}")
    trial_key = cfg.trial_key()
    code = cfg.code_fingerprint()  # in the trial key; recorded to say what changed when it is stale
    run_dir = session.run_dir(variant, slot, trial_key)
    parent = session.parent_run_id(variant)
    _check_claim(trials, trial)
    child = session.tracker.ensure_trial_run(
        parent,
        trial_key,
        f"{variant.name} lr={lr:.3g} seed={seed}",
        tags={
            "lr": repr(lr),
            "seed": str(seed),
            T.SLOT: slot,
            T.RUN_DIR: str(run_dir),
            T.VARIANT_KEY: variant.key,
            T.VARIANT: variant.name,
            "optuna.study": trials.study.study_name,
            "optuna.trial": str(trial.number),
        },
    )
    session.tracker.log_trial_params(child, flatten_dotted(cfg.to_mapping()))
    session.tracker.log_trial_code(child, code.digest, code.parts)
    trials.record(
        trial,
        trial_key=trial_key,
        code_fingerprint=code.digest,
        code_parts=dict(code.parts),
        mlflow_run_id=child,
        run_dir=str(run_dir),
    )
    return Attempt(variant, trial, trials, slot, lr, seed, cfg, trial_key, run_dir, child)


def _claim_name(trials: VariantTrials, trial: optuna.Trial) -> str:
    return f"{trials.study.study_name}#{trial.number}"


def _check_claim(trials: VariantTrials, trial: optuna.Trial) -> None:
    """Raise `LeaseLost` unless the claim is still live (before a write outside the engine)."""
    if not trials.is_live(trial):
        raise LeaseLost(
            f"the claim {_claim_name(trials, trial)} is no longer live (failed as stale, retried elsewhere)"
        )


def train(session: TrialSession, attempt: Attempt, callbacks: Sequence[Callback]) -> TrainResult:
    """The engine's result; `callbacks` join the engine's own (the pruner, the caller's).
    What it raises goes to `run_trial`'s one failure path."""
    from cem_ablate.training.engine import train_run

    # System metrics (CPU, memory, GPU with nvidia-ml-py) into the child, by MLflow's own monitor.
    with system_metrics(attempt.child, session.settings.tracking_uri, guard=attempt.check):
        return train_run(
            attempt.config,
            run_dir=attempt.run_dir,
            tracking_uri=session.settings.tracking_uri,
            experiment=session.spec.name,
            mlflow_run_id=attempt.child,
            extra_callbacks=callbacks,
            resume=True,
            progress=session.settings.progress,
            lease=attempt.lease,
        )


def finish(
    session: TrialSession, attempt: Attempt, result: TrainResult | None, outcome: TrialOutcome, seconds: float
) -> TrialRecord:
    """Tell Optuna (refused once the claim is dead), then the child's outcome, once: the
    same status, reason and cause in both (`result` None: the run raised, no numbers)."""
    status, value, reason = outcome.status, outcome.value, outcome.reason
    if status == TrialStatus.FINISHED and session.spec.eval is not None:  # before the tell: study/trial_eval.py
        from cem_ablate.study.trial_eval import evaluate_trial

        attempt.check()
        evaluate_trial(session.spec.eval, attempt.run_dir, session.settings.tracking_uri, attempt.child)
    facts: dict[str, Any] = {"reason": reason, "cause": outcome.cause.value, "seconds": round(seconds, 1)}
    metrics: dict[str, float | None] = {"lr": attempt.lr}
    if result is not None:
        facts |= {"steps": result.steps, "tokens_seen": result.tokens_seen, "diverged_step": result.diverged_step}
        metrics |= result.outcome_metrics()
    metrics["objective"] = value  # None unless finished with a finite objective
    recorded = attempt.trials.finish(attempt.trial, status, value, facts)
    if recorded:
        session.tracker.log_trial_outcome(
            attempt.child, status, reason, metrics, step=result.steps if result is not None else 0, cause=outcome.cause
        )
        # The parent's statistics and verdicts: the coordinator's (study.summary), not every trial's.
    if not recorded:  # the claim was lost before the tell: nothing of this attempt is recorded
        return attempt.record(TrialStatus.KILLED, value, reason, seconds, cause=Cause.CLAIM_LOST)
    return attempt.record(status, value, reason, seconds, cause=outcome.cause)


def release(session: TrialSession, attempt: Attempt, outcome: TrialOutcome, mark_child: bool = True) -> None:
    """Queue the stopped attempt's trial again now (WAITING; its checkpoint is saved), its
    reason and cause recorded, and end its child run KILLED; nothing else is recorded."""
    import contextlib

    if attempt.trials.release(attempt.trial, reason=outcome.reason, cause=outcome.cause.value) and mark_child:
        with contextlib.suppress(Exception):  # a tracking server that is away: the run stays RUNNING
            session.tracker.mark_killed(attempt.child)


def _free_slot(session: TrialSession, attempt: Attempt, outcome: TrialOutcome) -> None:
    """Queue the trial again now (KILLED, like an interrupt), if the full disk lets the
    stores take the write; otherwise it goes stale after the grace period. What the full
    disk refuses here is not said again: the process's one error line says the disk is full."""
    import contextlib

    with contextlib.suppress(Exception):
        attempt.trials.finish(
            attempt.trial, TrialStatus.KILLED, None, {"reason": outcome.reason, "cause": outcome.cause.value}
        )
    with contextlib.suppress(Exception):
        session.tracker.mark_killed(attempt.child)


def _reuse(session: TrialSession, attempt: Attempt, original: TrialRecord) -> TrialRecord:
    """Record another study's result of the same trial key instead of training (study.reuse)."""
    reason = f"reused from {original.reference}"
    facts = {k: v for k, v in original.attrs.items() if k in ("steps", "tokens_seen", "seconds", "diverged_step")}
    facts |= {
        "reused_from": original.reference,
        "reason": reason if original.status != TrialStatus.FINISHED else original.attrs.get("reason", ""),
    }
    recorded = attempt.trials.finish(attempt.trial, original.status, original.value, facts)
    if recorded:
        session.tracker.record_reused_trial(
            attempt.child, original.run_id, original.status, reason, {"objective": original.value, "lr": attempt.lr}
        )
    return attempt.record(
        original.status if recorded else TrialStatus.KILLED,
        original.value,
        reason,
        reused_from=original.reference,
        trial_key=original.trial_key,
    )
