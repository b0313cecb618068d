"""`cem-ablate components`: what can be put in a model config.

A plugin that failed to load is left out with one `warning:` line on stderr (the
registry's); the listing of everything else is unaffected.
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", help="only this kind (attention, mlp, preconditioner; plugins may add kinds)")


def run(args: argparse.Namespace) -> int:
    from cem_ablate import registry
    from cem_ablate.config.errors import unknown
    from cem_ablate.model import protocol  # noqa: F401  (declares what attention/mlp must provide)

    kinds = sorted({spec.kind for spec in registry.all_specs()})
    if args.kind and args.kind not in kinds:
        raise unknown("--kind", args.kind, kinds, what="component kind")
    print(registry.format_listing(kinds=[args.kind] if args.kind else None))
    if not args.kind:  # the model-wide options (docs/design/energy-lens.md#s11-2-velocity-stream to docs/design/energy-lens.md#s11-3-energy-transformer-block), from model/config.py
        from cem_ablate.model.config import format_model_options
        from cem_ablate.model.parametrization import format_parameter_classes

        print(format_model_options())
        print(format_parameter_classes())
    return 0
