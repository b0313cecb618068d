"""Entry point of `cem-ablate`.

Subcommands are modules of this package, each with `HELP`, `configure(parser)` and
`run(args) -> int`. They are imported only when chosen, so `--help` stays fast
(lightning and mlflow take seconds to import).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

# name -> one-line help; the module is cem_ablate.cli.<name>_command
SUBCOMMANDS = {
    "components": "List every registered component kind, name and option with defaults.",
    "train": "Train one model config (offline default corpus unless told otherwise).",
    "study": "Run (or --dry-run) an ablation study file: variants x learning rates.",
    "report": "Print and write the report of a study (tables, Akima fits, plots).",
    "ui": "Serve the MLflow UI on 127.0.0.1 over the local store.",
    "bench": "Benchmark training-step throughput, MFU and peak memory of variants.",
    "generate": "Generate text from a trained run or checkpoint (greedy or sampled, with the decoding cache).",
    "power": "False-positive rate and detectable Δ of a seed design (--seeds 5 or 2..5).",
    "coord-check": "muP coordinate check: does every module's activation scale stay put across widths?",
    "export": "Write a trained run as a Hugging Face model folder (AutoModelForCausalLM).",
    "eval": "Score a trained run with lm-evaluation-harness tasks; metrics into its MLflow run.",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cem-ablate",
        description="Ablation studies of Transformer layer parameterizations (CEM paper).",
    )
    from cem_ablate import __version__  # the one owner (pyproject reads it; the trial key holds it)

    parser.add_argument("--version", action="version", version=f"cem-ablate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text, add_help=False)
    return parser


def _command_module(name: str):
    return importlib.import_module(f"cem_ablate.cli.{name.replace('-', '_')}_command")


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """The parser of `cem-ablate <name>` (also what the CLI reference page is generated from)."""
    parser = argparse.ArgumentParser(prog=f"cem-ablate {name}", description=SUBCOMMANDS[name])
    _command_module(name).configure(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] not in SUBCOMMANDS:
        args = parser.parse_args(argv)  # prints help or a usage error
        parser.print_help()
        return 0 if not argv else 2
    name, rest = argv[0], argv[1:]
    module = _command_module(name)
    sub_parser = subcommand_parser(name)
    # intermixed: `key=value` overrides may follow options (`coord-check CONFIG --variant X
    # model.steps=2`), as a researcher types them; plain parse_args stops at the first option
    args = sub_parser.parse_intermixed_args(rest)
    from cem_ablate.config.errors import ConfigError
    from cem_ablate.config.trial_outcome import ONE_LINE_EXIT, Cause

    try:
        return int(module.run(args) or 0)
    except ConfigError as err:  # bad input, before anything ran: the common case, without torch's import
        print(f"error: {err}", file=sys.stderr)
        return ONE_LINE_EXIT
    except (Exception, KeyboardInterrupt) as err:  # the process edge: the cause decides (training.failure)
        from cem_ablate.training.failure import failure_of

        failure = failure_of(err, _written_places(args), getattr(args, "tracking_uri", None))
        meaning = failure.outcome.meaning
        if failure.cause == Cause.INTERRUPTED:
            print(failure.outcome.reason, file=sys.stderr)
            return meaning.exit_status
        if not meaning.says_one_line:  # an unexpected error keeps its traceback
            raise
        print(f"error: {failure.outcome.reason}", file=sys.stderr)
        return meaning.exit_status


def _written_places(args: argparse.Namespace) -> list[Path]:
    """Where a command writes: its local stores, run folders and reports (for the disk
    that filled up, when the error itself names no file)."""
    from cem_ablate.study.storage import sqlite_path
    from cem_ablate.tracking.store import sqlite_store_path

    places = [Path.cwd() / "mlruns"]
    for url, to_path in (
        (getattr(args, "storage", None), sqlite_path),
        (getattr(args, "tracking_uri", None), sqlite_store_path),
    ):
        try:
            path = to_path(url) if url else None
        except Exception:  # noqa: BLE001 - an unusable URL was refused before anything ran
            path = None
        if path is not None:
            places.append(path)
    for name in ("workdir", "run_dir", "runs_root", "report_dir"):
        if getattr(args, name, None):
            places.append(Path(getattr(args, name)).resolve())
    return places


if __name__ == "__main__":
    sys.exit(main())
