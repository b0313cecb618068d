"""`cem-ablate bench`: training-step throughput, FLOP/s, MFU and peak memory of variants.

Examples:
    cem-ablate bench                               # the CPU comparison and its targets (long: see benchmarks/)
    cem-ablate bench --quick                       # seconds: tiny model, eager fp32
    cem-ablate bench --gpu                         # the GPU bench: 86M + 162M, seq 2048, bf16, eager +
                                                   # compiled -> benchmarks/results/gpu-<device>.{json,md}
    cem-ablate bench --variants llama cem_attn_t2 --modes eager --precisions fp32 --repeats 3
    cem-ablate bench --variants 'mine={mlp: {name: cem, steps: 3}}' --sizes tiny small
    cem-ablate bench --quick --profile-steps 2     # plus where each step's time goes (+ bench.<case>.trace.json)
    cem-ablate bench --variants llama cem_attn_t2_hb llama_nesterov_stream et_parallel_t2 --modes eager
    cem-ablate bench --decode                      # serving cost: prefill/decode tok/s, cache B/token, peak
                                                   # memory per variant vs Llama (86M at context 2048 + CPU sizes)
    cem-ablate bench --decode --quick              # seconds: tiny model, context 32
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

VARIANT_HELP = (
    "variant names: llama, hf_llama (transformers reference, eager), llama_nesterov_stream, "
    "cem_<attn|mlp|full>_t<T> and et_parallel_t<T> (CEM attention + Hopfield MLP, block: parallel) "
    "with optional modifiers _ckpt _ref _nodiag _sdpa _blocked _flex _perhead _exact _diag _identity "
    "_hb _nesterov, or 'label={yaml: attention, mlp, stream, stream_momentum, velocity_norm, block, "
    "parametrization, base_d_model, step_scaling, mup_readout, readout_init_scale}'"
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n", 2)[2]
    add = parser.add_argument
    add("--variants", nargs="*", metavar="V", help="timed variants (none: memory only); " + VARIANT_HELP)
    add("--memory-variants", nargs="*", metavar="V", help="variants measured for peak memory only")
    add("--sizes", nargs="+", metavar="S", help="'bench' (D 512, 6 layers, 8 heads) or a model size preset")
    add("--modes", nargs="+", metavar="M", help="eager and/or compiled")
    add(
        "--precisions",
        nargs="+",
        metavar="P",
        help="fp32 and/or bf16 (autocast, bf16-mixed); default fp32, plus bf16 where the device has it natively",
    )
    int_flags = {
        "batch-size": "sequences per step (default 4)",
        "seq-len": "tokens per sequence (default 512)",
        "vocab-size": "vocabulary size (default 32000)",
        "warmup-steps": "untimed steps per case first: AdamW state, compilation (default 2)",
        "repeats": "timed rounds, one step per case each, order rotated (default 10)",
        "steps-per-sample": "steps in one timed sample (default 1)",
        "seed": "weights and batch seed (default 0)",
        "profile-steps": "after timing, profile N steps of every timed case: kernels (CUDA) or operators (CPU) "
        "by name and category, GPU busy fraction, and a Chrome trace with shapes and FLOPs "
        "beside the JSON, <json stem>.<case>.trace.json, or in --trace-dir "
        "(default 0: off; 2 with --gpu)",
    }
    for flag, text in int_flags.items():
        add(f"--{flag}", type=int, metavar="N", help=text)
    add("--device", help="cpu (default) or cuda[:i]")
    add("--no-tune-allocator", action="store_true", help="keep glibc's default malloc thresholds")
    add("--peak", help="CPU peak FLOP/s for MFU: 'measure' (default: matmul, max over the run) or 'cached'")
    add("--quick", action="store_true", help="a seconds-long run: tiny model, short sequences, eager fp32")
    add(
        "--gpu",
        action="store_true",
        help="the GPU bench: 86M and 162M, sequence 2048, batch 8, bf16, eager and compiled, "
        "HF Llama reference, GPU targets; writes benchmarks/results/gpu-<device>.{json,md} "
        "(other flags still override)",
    )
    add(
        "--json",
        help="where to write the results (default: bench.json; with --gpu benchmarks/results/gpu-<device>.json)",
    )
    add("--markdown", help="also write the tables as markdown to this file (with --gpu: beside the JSON)")
    add(
        "--trace-dir",
        help="--profile-steps: write the Chrome traces into this folder instead of beside the JSON "
        "(one file per profiled case; scripts/gpu_check.sh packs them into one)",
    )
    add("--render", metavar="JSON", help="measure nothing: print (and --markdown) the tables of a results file")
    add(
        "--decode",
        action="store_true",
        help="serving cost instead of training steps (bench/decode.py): prefill and decode tokens/s, cache bytes "
        "per token and peak memory per variant, each against Llama; uses --variants --sizes --repeats "
        "--vocab-size --seed --device --quick --json --markdown and the three flags below",
    )
    add("--context", type=int, metavar="N", help="--decode: prompt tokens before decoding (default 2048)")
    add("--new-tokens", type=int, metavar="N", help="--decode: decoded tokens per timed sample (default 16)")
    add("--batch-sizes", type=int, nargs="+", metavar="N", help="--decode: decode batch sizes (default 1 8)")


def config_mapping(args: argparse.Namespace) -> dict:
    from cem_ablate.bench.config import GPU, QUICK

    mapping: dict[str, Any] = dict(QUICK) if args.quick else dict(GPU) if args.gpu else {}
    for key in (
        "variants",
        "memory_variants",
        "sizes",
        "modes",
        "precisions",
        "batch_size",
        "seq_len",
        "vocab_size",
        "warmup_steps",
        "repeats",
        "steps_per_sample",
        "seed",
        "device",
        "peak",
        "profile_steps",
    ):
        value = getattr(args, key)
        if value is not None:
            mapping[key] = value
    if args.no_tune_allocator:
        mapping["tune_allocator"] = False
    if "size_variants" in mapping:  # a preset's per-size subsets follow the sizes and variants asked for
        sizes, variants = mapping.get("sizes", []), mapping.get("variants", [])
        mapping["size_variants"] = {
            size: [v for v in names if v in variants]
            for size, names in mapping["size_variants"].items()
            if size in sizes
        }
    return mapping


def run_decode(args: argparse.Namespace) -> int:
    from cem_ablate.bench.decode import QUICK, DecodeBenchConfig, run_decode_bench, table, write_json
    from cem_ablate.config.schema import parse

    mapping = dict(QUICK) if args.quick else {}
    for key in ("variants", "sizes", "repeats", "vocab_size", "seed", "device", "context", "new_tokens", "batch_sizes"):
        if getattr(args, key) is not None:
            mapping[key] = getattr(args, key)
    cfg = parse(DecodeBenchConfig, mapping, "bench")
    rows, meta = run_decode_bench(cfg, log=lambda line: print(line, flush=True))
    text = table(rows, meta["config"])
    print()
    print(text)
    json_path = args.json or "bench-decode.json"
    write_json(json_path, rows, meta)
    print(f"\nwrote {json_path}")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(text + "\n")
        print(f"wrote {args.markdown}")
    return 1 if any(row.error for row in rows) else 0


def run(args: argparse.Namespace) -> int:
    if args.decode:
        return run_decode(args)
    from cem_ablate.bench.config import BenchConfig
    from cem_ablate.config.errors import ConfigError
    from cem_ablate.config.schema import parse

    if args.render:
        if not Path(args.render).is_file():
            raise ConfigError("--render", f"no results file at {args.render}.")
        from cem_ablate.bench.results import read_json

        rows, meta = read_json(args.render)
        json_path = args.render
        size = meta["config"]["sizes"][0]
    else:
        cfg = parse(BenchConfig, config_mapping(args), "bench")  # every user error surfaces here
        json_path = results_path(args, cfg.device)
        if cfg.profile_steps:  # the profiled cases' Chrome traces lie beside the JSON, or in --trace-dir
            stem = Path(json_path).with_suffix("")
            prefix = Path(args.trace_dir) / stem.name if args.trace_dir else stem
            cfg = dataclasses.replace(cfg, profile_trace=str(prefix))
        from cem_ablate.bench.runner import run_bench

        rows, meta = run_bench(cfg, log=lambda line: print(line, flush=True))
        size = cfg.sizes[0]

    from cem_ablate.bench.results import (
        contention_note,
        evaluate_gpu_targets,
        evaluate_targets,
        profiles_text,
        table,
        targets_table,
        write_json,
    )

    on_gpu = str(meta.get("device", "cpu")).startswith("cuda")
    if on_gpu:
        precision = "bf16" if "bf16" in meta.get("precisions", ["bf16"]) else "fp32"
        targets = evaluate_gpu_targets(rows, meta["config"]["sizes"], precision)
        title = f"GPU targets ({precision}, {meta.get('gpu', 'GPU')})"
    else:
        targets = evaluate_targets(rows, size=size)
        title = "CPU and energy-lens targets (fp32)"
    text = table(rows)
    if targets:
        text += f"\n\n{title}:\n\n" + targets_table(targets)
    if note := contention_note(rows):
        text += "\n\n" + note
    if profiles := profiles_text(rows):
        text += "\n\n" + profiles
    print()
    print(text)
    markdown_path = args.markdown
    if args.gpu and not args.render and on_gpu:
        markdown_path = markdown_path or str(Path(json_path).with_suffix(".md"))
    if not args.render:
        write_json(json_path, rows, targets, meta)
        print(f"\nwrote {json_path}")
    if markdown_path:
        header = facts_header(meta) if on_gpu else ""
        Path(markdown_path).parent.mkdir(parents=True, exist_ok=True)
        Path(markdown_path).write_text(header + text + "\n")
        print(f"wrote {markdown_path}")
    return 1 if any(row.error for row in rows) else 0


def results_path(args: argparse.Namespace, device: str) -> str:
    """Where the results JSON goes: --json, else under --gpu on a GPU
    benchmarks/results/gpu-<device>.json, else bench.json."""
    if args.json:
        return args.json
    if args.gpu and device.startswith("cuda"):
        import torch

        from cem_ablate.training.hardware import gpu_slug

        name = torch.cuda.get_device_name(torch.device(device))  # as the results' `gpu` fact names it
        return str(Path("benchmarks") / "results" / f"gpu-{gpu_slug(name)}.json")
    return "bench.json"


def facts_header(meta: dict) -> str:
    """The markdown file's first lines on a GPU: device, software, setup, kernels."""
    cfg = meta["config"]
    kernels = ", ".join(f"{k}: {v}" for k, v in meta.get("attention_kernels", {}).items())
    return (
        f"# `cem-ablate bench` on {meta.get('gpu')} ({meta.get('date')}, commit {meta.get('git_commit')})\n\n"
        f"- device: {meta.get('gpu')}, compute capability {meta.get('gpu_capability')}, "
        f"{meta.get('gpu_memory_gib')} GiB, {meta.get('gpu_multiprocessors')} SMs; MFU against the dense bf16 "
        f"peak {meta.get('gpu_peak_bf16_tflops')} TFLOP/s (training/hardware.py)\n"
        f"- software: torch {meta.get('torch')} (CUDA {meta.get('cuda')}), triton {meta.get('triton')}, "
        f"transformers {meta.get('transformers')}, Python {meta.get('python')}\n"
        f"- setup: sizes {', '.join(cfg['sizes'])}, sequence {cfg['seq_len']}, batch {cfg['batch_size']}, "
        f"vocabulary {cfg['vocab_size']}, {', '.join(meta.get('precisions', []))}, "
        f"modes {', '.join(cfg['modes'])}; {cfg['warmup_steps']} warm-up steps, {cfg['repeats']} timed rounds "
        f"of {cfg['steps_per_sample']} steps; peak MB = weights + AdamW state + the step's "
        f"torch.cuda.max_memory_allocated above what was held before it\n"
        f"- attention kernels: {kernels}\n\n"
    )
