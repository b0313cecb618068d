"""`cem-ablate export RUN_DIR|CHECKPOINT --to DIR`: a trained run as a Hugging Face
model folder (cem_ablate/export/hf_directory.py). DIR must be new (or empty); it is
written in a temporary folder beside it and renamed at the end."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN_DIR|CHECKPOINT", help="a run folder, or a .ckpt inside one")
    parser.add_argument("--to", required=True, metavar="DIR", help="the new Hugging Face model folder")


def run(args: argparse.Namespace) -> int:
    from cem_ablate.export.hf_directory import check_target, decoding_warning, export_run, is_llama_baseline
    from cem_ablate.model.transformer import CEMTransformer
    from cem_ablate.training.trained_run import load_trained_run

    check_target(Path(args.to))
    trained = load_trained_run(args.run)
    out = export_run(trained, args.to)
    model = trained.model
    assert isinstance(model, CEMTransformer)  # load_trained_run builds one (TrainedRun types it nn.Module)
    warning = decoding_warning(model)
    if warning:
        print(warning, file=sys.stderr)
    kind = "LlamaForCausalLM" if is_llama_baseline(model) else "CEMAblateForCausalLM (trust_remote_code=True)"
    print(f"exported {trained.config.name} ({trained.checkpoint}) to {out} as {kind}")
    return 0
