"""What `cem-ablate study` does before it trains, shared by one study and a campaign of
several files (cli/study_campaign.py): read and validate a study file, check what a run
needs before anything is created, the GPU rate a dry run prices with, and whether a stop
signal means the machine is being taken back."""

from __future__ import annotations

import argparse
from pathlib import Path

from cem_ablate.config import ConfigError


def load_expanded(file: str, scale: str | None, overrides: list[str]):
    """Read, override and validate the whole study; ConfigError names the file and key."""
    from cem_ablate.study.spec import load_study_mapping, parse_study
    from cem_ablate.study.variants import expand

    try:
        mapping = load_study_mapping(file, scale, overrides)
        return expand(parse_study(mapping), mapping)
    except ConfigError as err:
        raise ConfigError("", f"{file}: {err}") from None


def check_tokenizers(expanded) -> None:
    """Load every Hugging Face tokenizer the study names before any store is created:
    offline (or a wrong id) is one `error:` line now, not a failed trial per slot."""
    from cem_ablate.data.tokenizer import tokenizer_vocab_size

    for data in {v.config.data for v in expanded.variants}:
        tokenizer_vocab_size(data)


def gpu_rate(args: argparse.Namespace, compiled: bool):
    """The GPU-hours rate of a dry run: --bench's measured one, else --gpu-tflops and --mfu."""
    from cem_ablate.study.estimates import GpuRate, measured_rate

    if args.bench:
        return measured_rate(args.bench, compiled)
    return GpuRate(args.gpu_tflops, args.mfu)


def stopped_for_the_machine() -> bool:
    """Whether SIGTERM or SIGUSR1 stopped the run (the machine is taken back,
    training.preemption): then no report is written, and the process leaves its final
    garbage collection out (`exit_soon`), within the signal's deadline."""
    from cem_ablate.training.preemption import STOP, exit_soon

    if STOP.received not in ("SIGTERM", "SIGUSR1"):
        return False
    exit_soon()
    return True


def study_settings(expanded, args: argparse.Namespace, workers: int, console):
    """The run's settings, once every store, server, tokenizer and eval task it needs
    has been checked (before anything is created)."""
    from cem_ablate.study.session import StudySettings
    from cem_ablate.study.storage import StorageSettings, default_storage_url, sqlite_path
    from cem_ablate.tracking.store import check_tracking_server, default_tracking_uri, set_mlflow_outage_window

    execution = expanded.spec.execution
    storage_url = args.storage or default_storage_url()
    sqlite_path(storage_url)  # rejects in-memory SQLite before anything is created
    if args.tracking_uri:
        check_tracking_server(args.tracking_uri)  # a dead server: one line now, not MLflow's 4-minute retry
    check_tokenizers(expanded)
    if expanded.spec.eval is not None:  # task names and data, before anything is created
        from cem_ablate.study.trial_eval import check_eval

        check_eval(expanded.spec.eval)
    set_mlflow_outage_window(args.outage_wait)  # this process's MLflow client and the workers it starts
    return StudySettings(
        storage=StorageSettings(storage_url, args.heartbeat, args.grace, args.outage_wait),
        tracking_uri=args.tracking_uri or default_tracking_uri(),
        workdir=Path(args.workdir).resolve(),
        threads=args.threads or execution.threads,
        progress=workers == 1 and console.is_terminal,
        reuse=not args.no_reuse,
    )


def check_plugin_components(expanded) -> None:
    """The conformance check (cem_ablate/model/conformance.py) on every plugin attention
    and MLP the study uses, before anything is created: a failure is one ConfigError.
    The built-in zoo is checked by its tests."""
    from cem_ablate.model.conformance import check_component

    used: dict[tuple[str, str], str] = {}  # (kind, component) -> the first variant using it
    for variant in [*expanded.variants, *getattr(expanded, "proxies", [])]:
        for kind in ("attention", "mlp"):
            sub = getattr(variant.config.model, kind)
            if sub.spec.source != "built-in":
                used.setdefault((kind, sub.name), variant.name)
    for (kind, name), variant in used.items():
        result = check_component(kind, name)
        if not result.passed:
            lines = "; ".join(line.removeprefix(f"{result.label}: ") for line in result.failures)
            raise ConfigError(
                f"model.{kind}",
                f"{result.label}, used by variant {variant!r}, fails the component "
                f"contract: {lines} (`cem-ablate components --check {kind}/{name}`).",
            )
