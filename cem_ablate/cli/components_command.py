"""`cem-ablate components`: what can be put in a model config."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", help="only this kind (attention, mlp, preconditioner, ...)")


def run(args: argparse.Namespace) -> int:
    from cem_ablate import registry

    text = registry.format_listing()
    if args.kind:
        registry.get(args.kind, registry.names(args.kind)[0] if registry.names(args.kind) else "", "--kind")
        blocks = text.split("\n")
        keep, on = [], False
        for line in blocks:
            if not line.startswith(" "):
                on = line == f"{args.kind}:"
            if on:
                keep.append(line)
        text = "\n".join(keep)
    print(text)
    return 0
