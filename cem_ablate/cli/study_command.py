"""`cem-ablate study FILE [FILE ...]`: train every variant at every learning rate, fit lr*, report.

    cem-ablate study studies/quickstart.yaml --dry-run     # plan and cost, nothing written
    cem-ablate study studies/quickstart.yaml               # run (or resume) it
    cem-ablate study studies/quickstart.yaml --workers 2   # two local worker processes
    cem-ablate study paper.yaml --storage postgresql://... --tracking-uri http://mlflow:5000
                                                           # same command on every machine
    cem-ablate study studies/fig*.yaml --scale transfer --dry-run
                                                           # several files as one campaign

Several files are one campaign (`study.campaign`, cli/study_campaign.py): every distinct
trial counted, priced and trained once, in one queue (proxies first); each file's report
as if it ran alone.

The whole file (every variant after axis expansion) is validated before anything is
created: a bad file exits with one `error:` line and leaves the stores untouched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cem_ablate.cli.study_setup import (
    check_plugin_components,
    gpu_rate,
    load_expanded,
    stopped_for_the_machine,
    study_settings,
)
from cem_ablate.config import ConfigError

if TYPE_CHECKING:
    from cem_ablate.study.reuse import StaleTrials


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        nargs="+",
        help="study file (YAML); several files are one campaign: each distinct trial (by its trial "
        "key) trained once in one queue, proxies first, and each file's report as alone",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print variants x learning rates with parameters, tokens, FLOPs, GPU-hours, the CPU "
        "time of the trials left (and what the storage's finished trials of the same variants "
        "took) and the design's power; for several files the campaign's distinct trials and "
        "GPU-hours beside the files priced alone; start and write nothing",
    )
    parser.add_argument(
        "--scale",
        action="append",
        default=[],
        help="apply each study file's named overrides under `scale:` (e.g. smoke); a dry run takes "
        "several and prices each beside the others (e.g. --scale transfer --scale forecast)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the study file (of every file), e.g. base.train.max_steps=50 (repeatable)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="local worker processes (default: the file's execution.workers, else 1: in this process)",
    )
    parser.add_argument(
        "--storage",
        help="Optuna storage URL shared by all workers and machines "
        "(default sqlite:///<cwd>/mlruns/optuna.db; e.g. postgresql://...)",
    )
    parser.add_argument(
        "--tracking-uri",
        help="MLflow tracking URI (default sqlite:///<cwd>/mlruns/mlflow.db; or a tracking server http://host:port)",
    )
    parser.add_argument(
        "--workdir",
        default="mlruns/studies",
        help="run folders (checkpoints) and worker logs: <workdir>/<study>/ (default mlruns/studies)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads per worker (default: the file's execution.threads, else cores / workers)",
    )
    parser.add_argument("--heartbeat", type=int, default=10, help="seconds between trial heartbeats (default 10)")
    parser.add_argument(
        "--grace",
        type=int,
        default=60,
        help="seconds without heartbeat before another machine retries a trial (default 60)",
    )
    parser.add_argument(
        "--outage-wait",
        type=int,
        default=120,
        metavar="SECONDS",
        help="how long a database (--storage) or MLflow server (--tracking-uri) that went away "
        "mid-study is waited for before the trials in training stop and are queued again "
        "(default 120; MLflow's MLFLOW_HTTP_REQUEST_* variables, when set, win for MLflow)",
    )
    parser.add_argument(
        "--report-dir",
        default="reports",
        help="where the final report goes: <report-dir>/<study>/report.md + PNGs (default reports)",
    )
    parser.add_argument("--no-report", action="store_true", help="do not print/write the report at the end")
    parser.add_argument(
        "--no-reuse",
        action="store_true",
        help="train every trial, even one another study in the same storage already finished "
        "with the same trial key (default: reuse it, link its MLflow run)",
    )
    parser.add_argument(
        "--gpu-tflops",
        type=float,
        default=312.0,
        help="dry run: dense bf16 peak per GPU for GPU-hours (default 312, A100)",
    )
    parser.add_argument("--mfu", type=float, default=0.4, help="dry run: assumed model FLOPs utilization (default 0.4)")
    parser.add_argument(
        "--bench",
        metavar="FILE",
        help="dry run: price GPU time at the GPU peak and MFU of a `cem-ablate bench` results file "
        "(JSON; Llama's MFU in the mode the studies train in) instead of --gpu-tflops and --mfu",
    )
    parser.add_argument(
        "--effect",
        type=float,
        default=None,
        help="dry run of several files: the true Δ, in seed-to-seed stds, at which sequential seeds' "
        "expected case is computed (default: the smallest Δ 3 fixed seeds detect with 80%% "
        "power)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="GPU_HOURS",
        help="dry run of several files: the GPU-hours the campaign may cost; says whether it fits, by "
        "how much it misses, and the MFU at which it would fit",
    )
    parser.add_argument(
        "--cpu-gflops",
        type=float,
        default=None,
        help="dry run: training GFLOP/s of this CPU machine, startup and evaluation included, for the "
        "CPU time (default 26.2, measured on the quickstart on 2 cores; conservative for wider "
        "models)",
    )


def _check_options(args: argparse.Namespace) -> None:
    if args.workers is not None and args.workers < 1:
        raise ConfigError("--workers", f"must be at least 1, got {args.workers}.")
    if args.threads is not None and args.threads < 1:
        raise ConfigError("--threads", f"must be at least 1, got {args.threads}.")
    if args.heartbeat < 1:
        raise ConfigError("--heartbeat", f"must be at least 1 second, got {args.heartbeat}.")
    if args.grace <= args.heartbeat:
        raise ConfigError("--grace", f"must exceed --heartbeat ({args.heartbeat} s), got {args.grace}.")
    if not 10 <= args.outage_wait <= 1000:
        raise ConfigError("--outage-wait", f"must be between 10 and 1000 seconds, got {args.outage_wait}.")
    if not 0 < args.mfu <= 1:
        raise ConfigError("--mfu", f"must be in (0, 1], got {args.mfu}.")
    if not args.gpu_tflops > 0:
        raise ConfigError("--gpu-tflops", f"must be > 0, got {args.gpu_tflops}.")
    if args.cpu_gflops is not None and not args.cpu_gflops > 0:
        raise ConfigError("--cpu-gflops", f"must be > 0, got {args.cpu_gflops}.")
    if args.budget is not None and not args.budget > 0:
        raise ConfigError("--budget", f"must be > 0 GPU-hours, got {args.budget}.")
    if args.effect is not None and not args.effect > 0:
        raise ConfigError("--effect", f"must be > 0 (a Δ in seed-to-seed stds), got {args.effect}.")
    if len(args.scale) > 1 and not args.dry_run:
        raise ConfigError(
            "--scale", f"a run takes one scale, got {', '.join(args.scale)}; several price side by side with --dry-run."
        )


def _stale_line(head: str, count: int, whose: str, cause) -> str:
    """One line: how many trials have another key than their grid point now, and why (the
    modules whose code changed, or the data or platform version)."""
    if not cause.code_changed:
        return (
            f"{head} (data or platform version changed): {count} trials {whose} under the same code but "
            f"another trial key"
        )
    where = f"; code changed in: {cause.where()}" if cause.files else " (no per-module digests recorded)"
    return f"{head} (code changed): {count} trials {whose} under other code{where}"


def _print_reuse(
    rows, reused: dict[str, int], done: dict[str, int], stale: StaleTrials, args: argparse.Namespace, console
) -> None:
    """How many planned trials an existing storage already holds (trained once, reused), and
    how many other studies hold under other keys only, and why (`study.reuse.StaleTrials`)."""
    count = sum(reused.values())
    hours = sum(reused.get(r.variant.key, 0) * r.estimate.gpu_hours(args.gpu_tflops, args.mfu) for r in rows)
    if sum(done.values()):
        console.print(f"done: {sum(done.values())} trials of this study already finished (a run trains the rest)")
    if count:
        console.print(
            f"reused: {count} trials already finished in this storage by other studies "
            f"(not retrained; {hours:.3g} GPU-hours saved; --no-reuse retrains them)"
        )
    elif not stale.total_elsewhere:
        console.print("reused: none (no trial of this study is finished in another study of the storage)")
    if stale.total_elsewhere:
        console.print(
            _stale_line(
                "not reused",
                stale.total_elsewhere,
                "of this study's grid other studies finished",
                stale.elsewhere_cause,
            ),
            markup=False,
            highlight=False,
        )


def run(args: argparse.Namespace) -> int:
    from cem_ablate.tracking.credentials import without_password

    _check_options(args)
    # From here on the URLs carry no password: it waits in the environment, which the
    # workers inherit, and never reaches a file (tracking.credentials).
    args.storage, args.tracking_uri = without_password(args.storage), without_password(args.tracking_uri)
    if len(args.file) > 1 or len(args.scale) > 1:
        from cem_ablate.cli.study_campaign import run_campaign_command

        return run_campaign_command(args, _console())
    args.file, args.scale = args.file[0], (args.scale[0] if args.scale else None)
    expanded = load_expanded(args.file, args.scale, args.set)
    check_plugin_components(expanded)  # a plugin breaking the contract: one error, before a plan or a trial
    from cem_ablate.study.trusted_widths import trust_warning

    warning = trust_warning(expanded)  # a proxy or ladder width outside the trusted range, before training
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)

    console = _console()
    if args.dry_run:
        return _dry_run(expanded, args, console)
    return _run_study(expanded, args, console)


def _console():
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # logs and pipes: don't squeeze tables to 80 columns
        console = Console(width=160)
    return console


def _dry_run(expanded, args: argparse.Namespace, console) -> int:
    """Print the plan: what the study will run and cost, and its power; nothing is written."""
    from cem_ablate.study.transfer import is_transfer

    rate = gpu_rate(args, all(v.config.train.compile for v in expanded.variants))
    args.gpu_tflops, args.mfu = rate.tflops, rate.mfu
    if rate.source:
        console.print(f"GPU time at {rate.describe()}", markup=False, highlight=False)

    if is_transfer(expanded):
        from cem_ablate.study.dry_run import print_transfer_plan

        print_transfer_plan(expanded, args.gpu_tflops, args.mfu, console, args.cpu_gflops)
        return 0
    from cem_ablate.study.dry_run import measured_seconds, plan, print_plan, seed_spread
    from cem_ablate.study.reuse import dry_run_reads, expected_reuse
    from cem_ablate.study.storage import default_storage_url

    rows = plan(expanded)
    # the storage, read once (read only; nothing is created without one): the planned
    # trials it holds settled, and how many this study finished under other code
    grid, stale = dry_run_reads(expanded, args.storage or default_storage_url())
    reused, done = expected_reuse(expanded, grid)  # by other studies (reused), by this one
    finished = dict(done)  # a run trains neither its own finished trials nor, with reuse, others'
    if not args.no_reuse:
        for key, n in reused.items():
            finished[key] = finished.get(key, 0) + n
    workers = args.workers or expanded.spec.execution.workers  # what a run would start
    print_plan(
        expanded,
        rows,
        args.gpu_tflops,
        args.mfu,
        console,
        seed_spread(expanded, grid),
        finished,
        args.cpu_gflops,
        measured_seconds(grid),
        workers,
    )
    if stale.total:  # retrained with or without reuse
        console.print(
            _stale_line("to retrain", stale.total, "of this study finished", stale.cause), markup=False, highlight=False
        )
    if not args.no_reuse:
        _print_reuse(rows, reused, done, stale, args, console)
    return 0


def _run_study(expanded, args: argparse.Namespace, console) -> int:
    """Run (or resume) the study, then print and write its report."""
    from cem_ablate.study.coordinator import run_study
    from cem_ablate.study.transfer import is_transfer
    from cem_ablate.tracking.local_store import private_files

    workers = args.workers or expanded.spec.execution.workers
    settings = study_settings(expanded, args, workers, console)
    echo = lambda line: print(line, flush=True)  # noqa: E731
    # stores, run folders, logs, worker payload and the report's artifacts on the parents: the user's only (0600/0700)
    with private_files():
        if is_transfer(expanded):
            code = _run_transfer(expanded, settings, workers, echo)
        else:
            code = run_study(expanded, settings, workers, echo=echo)
        if code is None:  # a transfer whose proxy has no lr*
            return 1
        if stopped_for_the_machine():
            return code
        if not args.no_report:
            from cem_ablate.reporting.report import make_report

            path = make_report(
                settings.tracking_uri,
                expanded.spec.name,
                Path(args.report_dir) / expanded.spec.name,
                [v.key for v in expanded.variants],
                console,
                expanded=expanded,
            )
            print(f"report: {path}")
    return code


def _run_transfer(expanded, settings, workers: int, echo) -> int | None:
    """lr_search method transfer (study/transfer.py): the proxies on the grid, then each variant
    at its proxy's lr*. None when a proxy has no lr* (its target cannot run)."""
    from cem_ablate.study.coordinator import INTERRUPTED, run_study, run_study_outcome
    from cem_ablate.study.storage import close_storage, open_storage
    from cem_ablate.study.transfer import missing_optima, proxy_optima, proxy_study, target_study, transfer_lines

    proxies = proxy_study(expanded)
    echo(f"transfer, phase 1 of 2: the proxies ({len(proxies.variants)}) on the full grid")
    proxy_outcome = run_study_outcome(proxies, settings, workers, echo=echo)
    proxy_code = proxy_outcome.code
    if proxy_code == INTERRUPTED or not proxy_outcome.complete:
        # An lr* from a partial grid is a wrong number: with the high rates still queued (the grid
        # runs low to high) it sits at the grid's edge (seen on a GPU lease cut short).
        echo("no lr* is transferred from an unfinished proxy grid: rerun the same command to finish it")
        return proxy_code if proxy_code else 1
    storage = open_storage(settings.storage)
    try:
        optima = proxy_optima(proxies, storage)
    finally:
        close_storage(storage)
    for line in transfer_lines(expanded, optima):
        echo(line)
    missing = missing_optima(expanded, optima)
    if missing:
        echo(f"no lr* to transfer for {', '.join(missing)}: rerun the same command to retry their proxies")
        return None
    echo(f"transfer, phase 2 of 2: every variant at its proxy's lr*, seeds {list(expanded.spec.seeds)}")
    return max(proxy_code, run_study(target_study(expanded, optima), settings, workers, echo=echo))
