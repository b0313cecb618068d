"""`cem-ablate report STUDY`: the table, markdown and figures of a study, from MLflow.

STUDY is a study file (its variants, after `--scale`/`--set`, are selected exactly by
their variant key; its `statistics:` decide the verdicts) or a study name (the newest
run of each variant name; the verdicts as the study recorded its design).
Output: a table on the terminal and `<out>/report.md`, `<out>/ppl_vs_params.png`
(Fig. 2 style), `<out>/ppl_vs_lr.png` (Fig. 3a style); `<out>` defaults to
`reports/<study name>/`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", metavar="STUDY", help="study file (YAML) or study name")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default sqlite:///<cwd>/mlruns/mlflow.db)")
    parser.add_argument("--scale", help="with a study file: the scale it was run with")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with a study file: the --set overrides it was run with",
    )
    parser.add_argument("--out", help="output folder (default reports/<study name>)")


def _is_file(study: str) -> bool:
    return study.endswith((".yaml", ".yml")) or Path(study).is_file()


def _load_study(args: argparse.Namespace):
    """(the study file expanded, its name); (None, name) after one `warning:` line when
    only its components are missing, e.g. a plugin no longer installed or failing to
    import: the report then comes from the stores alone, by the study's name. Any other
    error in the file stands."""
    from cem_ablate import registry
    from cem_ablate.cli.study_command import load_expanded
    from cem_ablate.config import ConfigError
    from cem_ablate.study.spec import load_study_mapping, parse_study

    before = len(registry.missing())  # lookups of this process before reading this file do not count
    try:
        expanded = load_expanded(args.study, args.scale, args.set)
        return expanded, expanded.spec.name
    except ConfigError:
        missing = registry.missing()[before:]
        if not missing:
            raise
    name = parse_study(load_study_mapping(args.study, args.scale, args.set)).name
    print(
        f"warning: {args.study}: {'; '.join(missing)}; the report reads the MLflow store alone: the newest "
        f"run of each variant of study {name!r}, its verdicts by the design the study recorded.",
        file=sys.stderr,
    )
    return None, name


def run(args: argparse.Namespace) -> int:
    from cem_ablate.config import ConfigError

    variant_keys, expanded = None, None
    if _is_file(args.study):
        expanded, name = _load_study(args)
        if expanded is not None:
            variant_keys = [v.key for v in expanded.variants]
    else:
        if args.scale or args.set:
            raise ConfigError("--scale", "--scale and --set only apply when STUDY is a study file.")
        name = args.study

    from rich.console import Console

    from cem_ablate.reporting.report import make_report
    from cem_ablate.tracking.credentials import without_password
    from cem_ablate.tracking.store import check_tracking_server, default_tracking_uri, sqlite_store_path

    uri = without_password(args.tracking_uri) or default_tracking_uri()  # password: environment only
    check_tracking_server(uri)  # http(s) only: a dead server is one line, not a 4-minute retry
    db = sqlite_store_path(uri)
    if db is not None and not db.exists():  # don't create an empty store just to say it is empty
        raise ConfigError("--tracking-uri", f"no MLflow store at {db}; run the study first.")
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    out = Path(args.out) if args.out else Path("reports") / name
    path = make_report(uri, name, out, variant_keys, console, expanded=expanded)
    print(f"report: {path}")
    return 0
