"""Train one claimed trial through the engine and record what happened, everywhere.

    claimed Optuna trial -> lr, seed -> child MLflow run (found or created by trial key)
      -> train_run(config, run_dir, mlflow_run_id=child) while a heartbeat thread runs
      -> Optuna: COMPLETE(value) / FAIL(status, reason) / PRUNED
      -> MLflow child: status tag, final metrics; parent: Akima summary

The run folder is fixed per trial key, so a retried trial resumes from the killed
attempt's last checkpoint and logs into the same child run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from cem_ablate.study.summary import publish
from cem_ablate.study.trials import DIVERGED, FAILED, FINISHED, KILLED, PRUNED, SLOT_ATTR, HeartbeatThread
from cem_ablate.study.variants import Variant
from cem_ablate.tracking import tags as T

OBJECTIVE_NAMES = {"text": "test perplexity", "gp": "test RMSE", "mqar": "recall error"}


@dataclass(frozen=True)
class TrialOutcome:
    variant: str
    slot: str
    lr: float
    seed: int
    status: str
    value: float | None
    reason: str
    seconds: float


def _outcome(result, pruned: bool, error: str | None) -> tuple[str, float | None, str]:
    if pruned:
        return PRUNED, None, "pruned on validation loss"
    if result is None:
        return FAILED, None, error or "training raised"
    if result.status == "diverged":
        return DIVERGED, None, f"loss not finite at step {result.diverged_step}"
    if result.status == "finished":
        value = result.objective
        if value is not None and math.isfinite(value):
            return FINISHED, float(value), ""
        return DIVERGED, None, "final metric is not finite"
    return FAILED, None, result.error or "training failed"


def run_trial(session, variant: Variant, trial) -> TrialOutcome:
    from cem_ablate.study.pruning import pruning_callback
    from cem_ablate.training.engine import train_run

    spec = session.spec
    trials = session.trials[variant.key]
    low, high = spec.lr_search.lr_range
    lr = trial.suggest_float("lr", low, high, log=True)
    seed = trial.suggest_categorical("seed", list(spec.seeds))
    slot = str(trial.user_attrs.get(SLOT_ATTR))
    run_dir = session.run_dir(variant, slot)
    parent = session.parent_run_id(variant)
    child = session.tracker.ensure_trial_run(
        parent, f"{variant.key}/{slot}", f"{variant.name} lr={lr:.3g} seed={seed}",
        tags={"lr": repr(lr), "seed": str(seed), T.SLOT: slot, T.VARIANT_KEY: variant.key, T.VARIANT: variant.name,
              "optuna.study": trials.study.study_name, "optuna.trial": str(trial.number)})
    trial.set_user_attr("mlflow_run_id", child)
    trial.set_user_attr("run_dir", str(run_dir))
    cfg = variant.run_config(lr, seed, name=f"{spec.name}.{variant.key}.{slot}")
    pruner = pruning_callback(trial) if spec.lr_search.pruner != "none" else None

    start = time.time()
    result, error = None, None
    with HeartbeatThread(session.storage, trial._trial_id):
        try:
            result = train_run(cfg, run_dir=run_dir, tracking_uri=session.settings.tracking_uri,
                               experiment=spec.name, mlflow_run_id=child,
                               extra_callbacks=[pruner] if pruner else [], resume=True,
                               progress=session.settings.progress)
        except (KeyboardInterrupt, SystemExit):
            # Interrupted, not failed: free the slot now instead of after the grace period.
            trials.finish(trial, KILLED, None, {"reason": "interrupted"})
            session.tracker.client.set_terminated(child, "KILLED")
            raise
        except Exception as err:  # noqa: BLE001 - a broken trial must not stop the study
            error = f"{type(err).__name__}: {err}"
    seconds = time.time() - start

    status, value, reason = _outcome(result, pruner is not None and pruner.pruned_step is not None, error)
    attrs = {"reason": reason, "seconds": round(seconds, 1)}
    metrics = {"objective": value, "lr": lr}
    if result is not None:
        attrs |= {"steps": result.steps, "tokens_seen": result.tokens_seen}
        metrics |= {"test_ppl": result.test_ppl, "val_ppl": result.val_ppl, "test_loss": result.test_loss,
                    "val_loss": result.val_loss}
        if result.diverged_step is not None:
            attrs["diverged_step"] = result.diverged_step
    recorded = trials.finish(trial, status, value, {k: v for k, v in attrs.items() if v is not None})
    if recorded:
        session.tracker.log_trial_outcome(child, status, reason, metrics,
                                          step=result.steps if result is not None else 0)
        publish(session, variant)
    return TrialOutcome(variant.name, slot, lr, seed, status if recorded else KILLED, value, reason, seconds)
