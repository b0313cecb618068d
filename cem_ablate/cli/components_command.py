"""`cem-ablate components`: what can be put in a model config.

A plugin that failed to load is left out with one `warning:` line on stderr (the
registry's); the listing of everything else is unaffected.

`--check NAME` (or KIND/NAME) runs the conformance check (cem_ablate/model/conformance.py)
on that attention or MLP component: `ok:` and `note:` lines on stdout, one `error:` line
per failed check on stderr, exit status 1 if any failed.
"""

from __future__ import annotations

import argparse
import sys

CHECKED_KINDS = ("attention", "mlp")  # the sublayers the conformance check builds


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", help="only this kind (attention, mlp, preconditioner; plugins may add kinds)")
    parser.add_argument(
        "--check",
        metavar="NAME",
        help="check the attention or MLP component NAME (or KIND/NAME) "
        "against the contract: shape, causality, decode = forward, flops_per_token vs a measured count",
    )


def run(args: argparse.Namespace) -> int:
    from cem_ablate import registry
    from cem_ablate.config.errors import unknown
    from cem_ablate.model import protocol  # noqa: F401  (declares what attention/mlp must provide)

    kinds = sorted({spec.kind for spec in registry.all_specs()})
    if args.kind and args.kind not in kinds:
        raise unknown("--kind", args.kind, kinds, what="component kind")
    if args.check:
        return _check(args.check, args.kind)
    print(registry.format_listing(kinds=[args.kind] if args.kind else None))
    if not args.kind:  # the model-wide options (docs/design/energy-lens.md#s11-2-velocity-stream to docs/design/energy-lens.md#s11-3-energy-transformer-block), from model/config.py
        from cem_ablate.model.config import format_model_options
        from cem_ablate.model.parametrization import format_parameter_classes

        print(format_model_options())
        print(format_parameter_classes())
    return 0


def _check(target: str, kind: str | None) -> int:
    from cem_ablate import registry
    from cem_ablate.config.errors import ConfigError, unknown
    from cem_ablate.model.conformance import check_component

    kind, _, name = target.rpartition("/") if "/" in target else (kind or "", "", target)
    if kind and kind not in CHECKED_KINDS:
        raise ConfigError("--check", f"only {' and '.join(CHECKED_KINDS)} components are checked, not {kind}.")
    kinds = [k for k in ([kind] if kind else CHECKED_KINDS) if name in registry.names(k)]
    if not kinds:
        raise unknown(
            "--check",
            name,
            sorted({n for k in ([kind] if kind else CHECKED_KINDS) for n in registry.names(k)}),
            what=f"{kind or 'attention or mlp'} component",
        )
    failed = False
    for k in kinds:
        result = check_component(k, name)
        for note in result.notes:
            print(f"note: {note}")
        for line in result.failures:
            print(f"error: {line}", file=sys.stderr)
        if result.passed:
            print(f"ok: {result.label}: {', '.join(result.checked)}")
        failed |= not result.passed
    return 1 if failed else 0
