"""`cem-ablate bench`: training-step throughput, FLOP/s, MFU and peak memory of variants.

Examples:
    cem-ablate bench                               # the issue-5 comparison (long: see benchmarks/)
    cem-ablate bench --quick                       # seconds: tiny model, eager fp32
    cem-ablate bench --variants llama cem_attn_t2 --modes eager --precisions fp32 --repeats 3
    cem-ablate bench --variants 'mine={mlp: {name: cem, steps: 3}}' --sizes tiny small
"""

from __future__ import annotations

import argparse

VARIANT_HELP = ("variant names: llama, hf_llama (transformers reference, eager), cem_<attn|mlp|full>_t<T> with "
                "optional modifiers _ckpt _ref _nodiag _sdpa _perhead _exact _diag _identity, or "
                "'label={yaml model sub-config}'")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n", 2)[2]
    add = parser.add_argument
    add("--variants", nargs="*", metavar="V", help="timed variants (none: memory only); " + VARIANT_HELP)
    add("--memory-variants", nargs="*", metavar="V", help="variants measured for peak memory only")
    add("--sizes", nargs="+", metavar="S", help="'bench' (D 512, 6 layers, 8 heads) or a model size preset")
    add("--modes", nargs="+", metavar="M", help="eager and/or compiled")
    add("--precisions", nargs="+", metavar="P",
        help="fp32 and/or bf16 (autocast, bf16-mixed); default fp32, plus bf16 where the device has it natively")
    int_flags = {
        "batch-size": "sequences per step (default 4)",
        "seq-len": "tokens per sequence (default 512)",
        "vocab-size": "vocabulary size (default 32000)",
        "warmup-steps": "untimed steps per case first: AdamW state, compilation (default 2)",
        "repeats": "timed rounds, one step per case each, order rotated (default 10)",
        "steps-per-sample": "steps in one timed sample (default 1)",
        "seed": "weights and batch seed (default 0)",
    }
    for flag, text in int_flags.items():
        add(f"--{flag}", type=int, metavar="N", help=text)
    add("--device", help="cpu (default) or cuda[:i]")
    add("--no-tune-allocator", action="store_true", help="keep glibc's default malloc thresholds")
    add("--peak", help="CPU peak FLOP/s for MFU: 'measure' (default: matmul, max over the run) or 'cached'")
    add("--quick", action="store_true", help="a seconds-long run: tiny model, short sequences, eager fp32")
    add("--json", default="bench.json", help="where to write the results (default: bench.json)")
    add("--markdown", help="also write the tables as markdown to this file")
    add("--render", metavar="JSON", help="measure nothing: print (and --markdown) the tables of a results file")


def config_mapping(args: argparse.Namespace) -> dict:
    from cem_ablate.bench.config import QUICK

    mapping = dict(QUICK) if args.quick else {}
    for key in ("variants", "memory_variants", "sizes", "modes", "precisions", "batch_size", "seq_len",
                "vocab_size", "warmup_steps", "repeats", "steps_per_sample", "seed", "device", "peak"):
        value = getattr(args, key)
        if value is not None:
            mapping[key] = value
    if args.no_tune_allocator:
        mapping["tune_allocator"] = False
    return mapping


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cem_ablate.bench.config import BenchConfig
    from cem_ablate.config.errors import ConfigError
    from cem_ablate.config.schema import parse

    if args.render:
        if not Path(args.render).is_file():
            raise ConfigError("--render", f"no results file at {args.render}.")
        from cem_ablate.bench.results import read_json

        rows, meta = read_json(args.render)
        size = meta["config"]["sizes"][0]
    else:
        cfg = parse(BenchConfig, config_mapping(args), "bench")  # every user error surfaces here
        from cem_ablate.bench.runner import run_bench

        rows, meta = run_bench(cfg, log=lambda line: print(line, flush=True))
        size = cfg.sizes[0]

    from cem_ablate.bench.results import contention_note, evaluate_targets, table, targets_table, write_json

    targets = evaluate_targets(rows, size=size)
    text = table(rows)
    if targets:
        text += "\n\nIssue-5 targets (fp32):\n\n" + targets_table(targets)
    if note := contention_note(rows):
        text += "\n\n" + note
    print()
    print(text)
    if not args.render:
        write_json(args.json, rows, targets, meta)
        print(f"\nwrote {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
        print(f"wrote {args.markdown}")
    return 1 if any(row.error for row in rows) else 0
