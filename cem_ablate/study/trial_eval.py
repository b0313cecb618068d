"""A study's `eval:` (spec.EvalConfig): lm-evaluation-harness on every finished trial.

`check_eval` runs before anything is created (the CLI): every task name known, every
task's data loadable (offline: a Hub data set fails here, one error line). After a
trial trains to the end, `evaluate_trial` exports its run folder, scores the tasks and
logs `eval/<task>/<metric>` to its MLflow child; this happens before the trial is
marked finished in Optuna, so a worker killed while scoring leaves the trial to be
claimed again, whose run folder then holds the finished result (no retraining) and is
scored again. A scoring failure costs only the scores: one warning line, the trial
stays finished (its perplexity is real).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cem_ablate.evaluation.harness import EvalSpec, evaluate_trained, load_tasks
from cem_ablate.study.spec import EvalConfig
from cem_ablate.training.trained_run import load_trained_run


def eval_spec(config: EvalConfig) -> EvalSpec:
    return EvalSpec(tuple(config.tasks), config.include_path, config.limit)


def check_eval(config: EvalConfig | None) -> None:
    if config is not None:
        load_tasks(eval_spec(config), path="eval.tasks")


def evaluate_trial(config: EvalConfig, run_dir: Path, tracking_uri: str, run_id: str) -> dict[str, float]:
    """Score the trial's run folder and log the metrics to its child run ({} on failure)."""
    from cem_ablate.tracking.eval_metrics import log_eval_metrics

    try:
        metrics = evaluate_trained(load_trained_run(run_dir), eval_spec(config))
    except Exception as err:  # noqa: BLE001 - the trial trained: losing its scores must not lose it
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        print(
            f"warning: eval of {run_dir} failed ({type(err).__name__}: {first}); the trial stays finished "
            "without eval metrics.",
            file=sys.stderr,
        )
        return {}
    log_eval_metrics(tracking_uri, run_id, metrics)
    return metrics
