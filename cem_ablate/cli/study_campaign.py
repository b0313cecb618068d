"""`cem-ablate study FILE FILE ...`: several study files as one campaign (`study.campaign`).

    cem-ablate study studies/fig*.yaml --scale transfer --dry-run     # distinct trials and GPU-hours
    cem-ablate study studies/fig*.yaml --scale transfer --scale forecast --dry-run   # side by side
    cem-ablate study a.yaml b.yaml --workers 2                         # run: one queue, each report

Every file is read, overridden (`--scale`, `--set` apply to each) and validated before anything
is created: a bad file is one `error:` line naming it. A run queues every file's slots in one
queue, the transfer files' proxies first (with the grid files' trials), then the transfer
targets at their proxies' lr*; a trial several files ask for trains once (`study.campaign_session`);
then each file's report is written as if it had run alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cem_ablate.config import ConfigError


def campaign_files(args: argparse.Namespace, scale: str | None) -> list:
    """Every file at `scale` with `--set`, validated; the study names must differ (they name
    the Optuna studies and MLflow experiments each file keeps)."""
    from cem_ablate.cli.study_setup import check_plugin_components, load_expanded
    from cem_ablate.study.campaign import CampaignFile, check_campaign_file
    from cem_ablate.study.trusted_widths import trust_warning

    files: list[CampaignFile] = []
    seen: dict[str, str] = {}  # study name -> the file that named it
    for label in args.file:
        expanded = load_expanded(label, scale, args.set)
        check_plugin_components(expanded)
        check_campaign_file(expanded, label)
        name = expanded.spec.name
        if name in seen:
            raise ConfigError(
                "",
                f"{label}: study {name!r} is also {seen[name]}'s name (a file given twice?); "
                "each file of a campaign keeps its own study.",
            )
        seen[name] = label
        files.append(CampaignFile(label, expanded))
        warning = trust_warning(expanded)
        if warning is not None:
            print(f"{label}: {warning}", file=sys.stderr, flush=True)
    return files


def run_campaign_command(args: argparse.Namespace, console) -> int:
    scales = args.scale or [None]
    by_scale = [(scale, campaign_files(args, scale)) for scale in scales]  # every file and scale validated first
    if args.dry_run:
        return _dry_run(by_scale, args, console)
    return _run(by_scale[0][1], args, console)


def _dry_run(by_scale: list, args: argparse.Namespace, console) -> int:
    from cem_ablate.cli.study_setup import gpu_rate
    from cem_ablate.study.campaign import plan_campaign
    from cem_ablate.study.campaign_dry_run import gh, print_campaign, settled_trials
    from cem_ablate.study.storage import default_storage_url

    costs = []
    for scale, files in by_scale:
        rate = gpu_rate(args, all(v.config.train.compile for f in files for v in f.expanded.variants))
        plan = plan_campaign(files, args.effect)
        settled = None if args.no_reuse else settled_trials(plan, args.storage or default_storage_url())
        costs.append((scale, print_campaign(plan, rate, console, scale, settled, args.budget)))
    if len(costs) > 1:
        side = "; ".join(
            f"scale {scale or '(none)'} {gh(cost.worst)}"
            + (f" ({gh(cost.expected)} expected)" if cost.sequential else "")
            for scale, cost in costs
        )
        console.print(f"beside: {side} GPU-hours, each campaign's distinct trials once", markup=False, highlight=False)
    return 0


def _run(files: list, args: argparse.Namespace, console) -> int:
    """Run (or resume) the campaign, then write each file's report."""
    from cem_ablate.cli.study_setup import stopped_for_the_machine, study_settings
    from cem_ablate.tracking.local_store import private_files

    first = files[0].expanded
    workers = args.workers or first.spec.execution.workers
    for f in files[1:]:
        study_settings(f.expanded, args, workers, console)  # each file's tokenizers and eval tasks, checked
    settings = study_settings(first, args, workers, console)
    echo = lambda line: print(line, flush=True)  # noqa: E731
    with private_files():
        code = run_campaign(files, settings, workers, echo)
        if code is None:
            return 1
        if stopped_for_the_machine():
            return code
        if not args.no_report:
            from cem_ablate.reporting.report import make_report

            for f in files:
                path = make_report(
                    settings.tracking_uri,
                    f.name,
                    Path(args.report_dir) / f.name,
                    [v.key for v in f.expanded.variants],
                    console,
                    expanded=f.expanded,
                )
                print(f"report: {path}")
    return code


def run_campaign(files: list, settings, workers: int, echo) -> int | None:
    """Phase 1: the transfer files' proxies (first tier) and the grid files' trials; phase 2:
    the transfer files' targets at their proxies' lr*. None when a proxy has no lr*."""
    from cem_ablate.config.identity import digest
    from cem_ablate.study.campaign_session import Campaign
    from cem_ablate.study.coordinator import INTERRUPTED, run_study_outcome
    from cem_ablate.study.transfer import is_transfer, proxy_study

    transfer = [f.expanded for f in files if is_transfer(f.expanded)]
    grid = [f.expanded for f in files if not is_transfer(f.expanded)]
    name = "campaign-" + digest(sorted(f.name for f in files), chars=8)
    tiers = [tier for tier in ([proxy_study(e) for e in transfer], grid) if tier]
    parts = ([f"the {len(transfer)} transfer files' proxies"] if transfer else []) + (
        [f"the {len(grid)} grid files' trials"] if grid else []
    )
    echo(f"campaign, phase 1 of {2 if transfer else 1}: {' and '.join(parts)}")
    first = run_study_outcome(Campaign(name, tiers), settings, workers, echo=echo)
    if not transfer:
        return first.code
    if first.code == INTERRUPTED or not first.complete:
        echo("no lr* is transferred from an unfinished proxy grid: rerun the same command to finish it")
        return first.code if first.code else 1
    targets = _targets(transfer, settings, echo)
    if targets is None:
        return None
    echo(f"campaign, phase 2 of 2: the {len(targets)} transfer files' variants at their proxies' lr*")
    return max(first.code, run_study_outcome(Campaign(name, [targets]), settings, workers, echo=echo).code)


def _targets(transfer: list, settings, echo) -> list | None:
    """Each transfer file's target study at its proxies' lr* (read from the storage); None
    when a proxy has none."""
    from cem_ablate.study.storage import close_storage, open_storage
    from cem_ablate.study.transfer import missing_optima, proxy_optima, proxy_study, target_study, transfer_lines

    storage = open_storage(settings.storage)
    try:
        optima = [proxy_optima(proxy_study(e), storage) for e in transfer]
    finally:
        close_storage(storage)
    missing = []
    for expanded, found in zip(transfer, optima):
        for line in transfer_lines(expanded, found):
            echo(f"{expanded.spec.name}: {line}")
        missing += missing_optima(expanded, found)
    if missing:
        echo(f"no lr* to transfer for {', '.join(missing)}: rerun the same command to retry their proxies")
        return None
    return [target_study(e, found) for e, found in zip(transfer, optima)]
