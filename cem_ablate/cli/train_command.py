"""`cem-ablate train CONFIG.yaml [key.path=value ...]`: train one run config.

Prints the resolved config, parameters by component, token budget and FLOPs, the
device profile (every device-dependent choice, `training.device_profile`), trains
(resuming the run's last checkpoint if the same command was interrupted), and prints
a summary. The run folder is `runs/<name>-<config hash>` unless --run-dir is given,
so rerunning the same command after a kill continues where it stopped, and
rerunning a finished run just prints its result (--fresh starts over).
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP_EPILOG = """examples:
  cem-ablate train configs/tiny.yaml
  cem-ablate train configs/tiny.yaml model.attention.name=cem train.lr=2e-3
  cem-ablate train configs/tiny.yaml train.devices=2        (DDP on 2 CPU processes)
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = HELP_EPILOG
    parser.add_argument("config", help="run config YAML (sections name, model, train, data)")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value", help="override config values")
    parser.add_argument("--run-dir", help="run folder (default: <runs-root>/<name>-<config hash>)")
    parser.add_argument("--runs-root", default="runs", help="parent of default run folders (default: runs)")
    parser.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint or result; start over")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///<cwd>/mlruns/mlflow.db)")
    parser.add_argument("--experiment", help="MLflow experiment (default: the config's name)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resolved run (config, parameters, budget) only"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")


def run(args: argparse.Namespace) -> int:
    import yaml

    from cem_ablate.config import apply_overrides, load_yaml
    from cem_ablate.tracking.credentials import without_password
    from cem_ablate.training.config import parse_run_config
    from cem_ablate.training.device_profile import resolve_device_profile
    from cem_ablate.training.engine import resolve_run
    from cem_ablate.training.run_directory import default_run_dir, is_rank_zero_process

    args.tracking_uri = without_password(args.tracking_uri)  # the password waits in the environment
    mapping = load_yaml(args.config)
    mapping.setdefault("name", Path(args.config).stem)
    mapping = apply_overrides(mapping, args.overrides)
    resolved = resolve_run(parse_run_config(mapping))  # validates everything before anything is written
    cfg = resolved.config
    profile = resolve_device_profile(cfg.train)
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(cfg, args.runs_root)
    talk = is_rank_zero_process()  # DDP ranks > 0 re-run this command silently
    if talk:
        print(yaml.safe_dump(cfg.to_mapping(), sort_keys=False).rstrip())
        print()
        print(resolved.report.format())
        print(
            f"training FLOPs: {resolved.report.train_flops_per_token:,.0f}/token x {resolved.budget.tokens:,} tokens "
            f"= {resolved.train_flops:.3e}"
        )
        print(f"token budget: {resolved.budget.describe()}")
        print(profile.describe())
        print(f"run folder: {run_dir}")
    if args.dry_run:
        return 0
    if args.tracking_uri:
        from cem_ablate.tracking.store import check_tracking_server

        check_tracking_server(args.tracking_uri)  # a dead server: one line, not MLflow's 4-minute retry

    from cem_ablate.config.trial_status import TrialStatus
    from cem_ablate.training.engine import train_run
    from cem_ablate.training.run_directory import RunDirectory

    if talk and not args.fresh and RunDirectory(run_dir).finished_result(cfg):
        print("this run already ended; its result follows (--fresh trains it again)")
    from cem_ablate.tracking.local_store import private_files
    from cem_ablate.training.preemption import Preempted, exit_code, exit_soon

    with private_files():  # the MLflow store and the run folder: the user's only (0600/0700)
        try:
            result = train_run(
                cfg,
                run_dir=run_dir,
                tracking_uri=args.tracking_uri,
                experiment=args.experiment,
                resume=not args.fresh,
                progress=not args.no_progress,
                ddp_in_process=True,
            )
        except Preempted as stop:
            if talk:
                print(f"{stop}: checkpoint saved in {run_dir}; rerun the same command to resume", flush=True)
            exit_soon()
            return exit_code(stop)
    if talk:
        print_summary(result)
    return 0 if result.status == TrialStatus.FINISHED else 1


def print_summary(result) -> None:
    def fmt(value, spec=".4g"):
        return "-" if value is None or value != value else format(value, spec)

    lines = [f"status: {result.status}" + (f" ({result.error})" if result.error else "")]
    lines.append(f"steps: {result.steps:,}   tokens: {result.tokens_seen:,}   params: {result.params:,}")
    lines.append(
        f"val ppl: {fmt(result.val_ppl)}   test ppl: {fmt(result.test_ppl)}   test loss: {fmt(result.test_loss)}"
    )
    if result.rmse is not None:
        lines.append(f"test RMSE: {fmt(result.rmse)}")
    if result.recall_accuracy is not None:
        lines.append(f"test recall accuracy: {fmt(result.recall_accuracy)}")
    lines.append(f"tokens/s: {fmt(result.tokens_per_sec, ',.0f')}   MFU: {fmt(result.mfu, '.1%')}")
    lines.append(f"run folder: {result.run_dir}   MLflow run: {result.mlflow_run_id}")
    print("\n".join(lines))
