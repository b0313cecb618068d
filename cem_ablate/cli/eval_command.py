"""`cem-ablate eval RUN_DIR|CHECKPOINT --tasks ...`: lm-evaluation-harness on a trained
run (cem_ablate/evaluation/harness.py); metrics printed and logged to the run's MLflow
run as `eval/<task>/<metric>`. Needs the `[eval]` extra."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN_DIR|CHECKPOINT", help="a run folder, or a .ckpt inside one")
    parser.add_argument(
        "--tasks",
        action="append",
        required=True,
        metavar="TASK[,TASK]",
        help="lm-evaluation-harness task, group or tag names (repeatable)",
    )
    parser.add_argument("--include-path", metavar="DIR", help="a folder of local task YAML files")
    parser.add_argument("--limit", type=int, help="documents per task (default: all)")
    parser.add_argument(
        "--batch-size", type=int, default=1, help="sequences lm-eval scores per forward pass (HFLM's batch_size)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--no-log", action="store_true", help="do not log the metrics to MLflow")


def run(args: argparse.Namespace) -> int:
    from cem_ablate.config import ConfigError
    from cem_ablate.evaluation.harness import EvalSpec, evaluate_run, format_metrics, parse_task_list

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit", f"must be >= 1, got {args.limit}.")
    spec = EvalSpec(parse_task_list(args.tasks), args.include_path, args.limit, args.batch_size, args.device)
    trained, metrics, run_id = evaluate_run(args.run, spec, log=not args.no_log)
    print(format_metrics(metrics))
    print(f"logged to MLflow run {run_id}" if run_id else "not logged to MLflow (the run folder names no run)")
    return 0
