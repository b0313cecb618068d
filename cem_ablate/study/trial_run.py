"""Train one claimed trial through the engine and record what happened, everywhere.

    claimed Optuna trial -> lr, seed -> typed RunConfig (the variant's, at lr and seed)
      -> child MLflow run (found or created by `RunConfig.trial_key()`), its params
      -> train_run(config, run_dir, mlflow_run_id=child) (the engine logs the curves
         into the child, nothing else; the worker keeps the trial's heartbeat)
      -> Optuna: COMPLETE(value) / FAIL(status, reason) / PRUNED
      -> MLflow child: the outcome, written once (tracking.outcome); the parent's fit and
         verdicts are the coordinator's (study.summary.StudyPublisher)

The run folder is fixed per trial key, so a retried trial resumes from the killed
attempt's last checkpoint and logs into the same child run.
"""

from __future__ import annotations

import math
import time

from cem_ablate.config.loading import flatten_dotted
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.reuse import REUSED_FROM_ATTR, TRIAL_KEY_ATTR
from cem_ablate.study.trials import CODE_FINGERPRINT_ATTR, CODE_PARTS_ATTR, SLOT_ATTR
from cem_ablate.study.variants import Variant
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.disk_space import out_of_space
from cem_ablate.tracking.run_context import system_metrics

MAX_SEED = 2**31 - 1  # numpy's and Lightning's seed range


def _outcome(result, pruned: bool, error: str | None) -> tuple[TrialStatus, float | None, str]:
    if pruned:
        return TrialStatus.PRUNED, None, "pruned on validation loss"
    if result is None:
        return TrialStatus.FAILED, None, error or "training raised"
    if result.status == TrialStatus.DIVERGED:
        return TrialStatus.DIVERGED, None, f"loss not finite at step {result.diverged_step}"
    if result.status == TrialStatus.FINISHED:
        value = result.objective
        if value is not None and math.isfinite(value):
            return TrialStatus.FINISHED, float(value), ""
        return TrialStatus.DIVERGED, None, "final metric is not finite"
    return TrialStatus.FAILED, None, result.error or "training failed"


def run_trial(session, variant: Variant, trial) -> TrialRecord:
    """Train (or reuse) one claimed trial; its record as this worker saw it end (KILLED
    where the trial was failed as stale meanwhile and nothing was recorded)."""
    from cem_ablate.study.pruning import pruning_callback
    from cem_ablate.training.engine import train_run

    spec = session.spec
    trials = session.trials[variant.key]
    low, high = spec.lr_search.lr_range
    lr = trial.suggest_float("lr", low, high, log=True)
    # An int range, not the seed list as categorical choices: Optuna refuses a changed
    # choice list for a stored parameter, so adding a seed to a study file (rerunning
    # it on the same storage to train only the new seed) would fail.
    seed = trial.suggest_int("seed", 0, MAX_SEED)
    slot = str(trial.user_attrs.get(SLOT_ATTR))
    cfg = variant.run_config(lr, seed, name=f"{spec.name}.{variant.key}.{slot}")
    trial_key = cfg.trial_key()
    code = cfg.code_fingerprint()  # in the trial key; recorded to say what changed when it is stale
    run_dir = session.run_dir(variant, slot, trial_key)
    parent = session.parent_run_id(variant)
    child = session.tracker.ensure_trial_run(
        parent, trial_key, f"{variant.name} lr={lr:.3g} seed={seed}",
        tags={"lr": repr(lr), "seed": str(seed), T.SLOT: slot, T.VARIANT_KEY: variant.key, T.VARIANT: variant.name,
              "optuna.study": trials.study.study_name, "optuna.trial": str(trial.number)})
    session.tracker.log_trial_params(child, flatten_dotted(cfg.to_mapping()))
    session.tracker.log_trial_code(child, code.digest, code.parts)
    trial.set_user_attr(TRIAL_KEY_ATTR, trial_key)
    trial.set_user_attr(CODE_FINGERPRINT_ATTR, code.digest)
    trial.set_user_attr(CODE_PARTS_ATTR, dict(code.parts))
    trial.set_user_attr("mlflow_run_id", child)
    trial.set_user_attr("run_dir", str(run_dir))
    original = session.finished_elsewhere(trial_key, trials.study.study_name)
    if original is not None:
        return _reuse(session, variant, trial, slot, lr, seed, child, original)
    pruner = pruning_callback(trial) if spec.lr_search.pruner != "none" else None

    start = time.time()
    result, error = None, None
    # System metrics (CPU, memory, GPU with nvidia-ml-py) into the child, by MLflow's own monitor.
    with system_metrics(child, session.settings.tracking_uri):
        try:
            result = train_run(cfg, run_dir=run_dir, tracking_uri=session.settings.tracking_uri,
                               experiment=spec.name, mlflow_run_id=child,
                               extra_callbacks=[pruner] if pruner else [], resume=True,
                               progress=session.settings.progress)
        except (KeyboardInterrupt, SystemExit):
            # Interrupted, not failed: free the slot now instead of after the grace period.
            trials.finish(trial, TrialStatus.KILLED, None, {"reason": "interrupted"})
            session.tracker.mark_killed(child)
            raise
        except Exception as err:  # noqa: BLE001 - a broken trial must not stop the study
            if out_of_space(err, [run_dir]):  # the machine's failure, not the trial's: stop (tracking.disk_space)
                _free_slot(session, trials, trial, child, "disk full")
                raise
            error = f"{type(err).__name__}: {err}"
    seconds = time.time() - start

    status, value, reason = _outcome(result, pruner is not None and pruner.pruned_step is not None, error)
    attrs = {"reason": reason, "seconds": round(seconds, 1)}
    metrics = {"lr": lr}
    if result is not None:
        attrs |= {"steps": result.steps, "tokens_seen": result.tokens_seen}
        metrics |= result.outcome_metrics()
        if result.diverged_step is not None:
            attrs["diverged_step"] = result.diverged_step
    metrics["objective"] = value  # None unless finished with a finite objective
    recorded = trials.finish(trial, status, value, {k: v for k, v in attrs.items() if v is not None})
    if recorded:
        session.tracker.log_trial_outcome(child, status, reason, metrics,
                                          step=result.steps if result is not None else 0)
        # The parent's statistics and verdicts: the coordinator's (study.summary), not every trial's.
    return TrialRecord(lr, seed, status if recorded else TrialStatus.KILLED, value, reason, variant=variant.name,
                       slot=slot, trial_key=trial_key, study=trials.study.study_name, number=trial.number,
                       run_id=child, seconds=seconds)


def _free_slot(session, trials, trial, child: str, reason: str) -> None:
    """Queue the trial again now (KILLED, like an interrupt), if the full disk lets the
    stores take the write; otherwise it goes stale after the grace period."""
    import contextlib

    with contextlib.suppress(Exception):
        trials.finish(trial, TrialStatus.KILLED, None, {"reason": reason})
    with contextlib.suppress(Exception):
        session.tracker.mark_killed(child)


def _reuse(session, variant: Variant, trial, slot: str, lr: float, seed: int, child: str,
           original: TrialRecord) -> TrialRecord:
    """Record another study's result of the same trial key instead of training (study.reuse)."""
    trials = session.trials[variant.key]
    reason = f"reused from {original.reference}"
    attrs = {k: v for k, v in original.attrs.items() if k in ("steps", "tokens_seen", "seconds", "diverged_step")}
    attrs |= {REUSED_FROM_ATTR: original.reference, "reason": reason if original.status != TrialStatus.FINISHED
              else original.attrs.get("reason", "")}
    recorded = trials.finish(trial, original.status, original.value, attrs)
    if recorded:
        session.tracker.record_reused_trial(child, original.run_id, original.status, reason,
                                            {"objective": original.value, "lr": lr})
    return TrialRecord(lr, seed, original.status if recorded else TrialStatus.KILLED, original.value, reason,
                       variant=variant.name, slot=slot, trial_key=original.trial_key, study=trials.study.study_name,
                       number=trial.number, run_id=child, reused_from=original.reference)
