"""Training = bench: `cem-ablate train`'s tokens/s next to the bench step's, same config.

    python -m cem_ablate.bench.train_parity --device cuda --size 86M --seq-len 2048 \\
        --batch-size 8 --precision bf16 --mode compiled --steps 40 --out parity.md

The bar: on the GPU the training engine reaches >= 0.95x the bench's tokens/s for the
same model, batch and precision (training = bench: a study's trials run as fast as the
bench says its models can). Both sides here run the same
model config (`bench.variants.model_mapping`), batch, precision, compile setting, head +
loss unit and AdamW kernel:

- the bench: `run_bench` on that one case (warm-up, interleaved timed samples; the
  median step);
- training: the real `cem-ablate train` command, in a process of its own, on the
  synthetic MQAR task (in memory, so no tokenizer or corpus is needed; ids within the
  model's vocabulary), `train.compile` for the compiled mode, and every other choice
  left to the device profile when it is the device's default (precision `auto`, AdamW
  `auto`, clipping on: the settings a user's run gets); its tokens/s is the engine's own
  summary figure (`ThroughputMonitor`: training time only, the first optimizer step
  excluded), the number `cem-ablate train` prints and logs, read from its `result.json`.

The ratio train / bench is printed with both numbers. On a CPU it runs too (tests use
a tiny config) but says nothing about the GPU target: the host-side costs it measures
(Lightning's bookkeeping, syncs) matter only when the device runs ahead of Python.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.training.result import TrainResult

Log = Callable[[str], None]

PARITY_TARGET = 0.95  # `cem-ablate train` tokens/s over the bench step's, on the GPU


@dataclass
class ParityResult:
    variant: str
    size: str
    mode: str  # eager | compiled
    precision: str  # fp32 | bf16
    device: str
    batch_size: int
    seq_len: int
    bench_tokens_per_sec: float
    train_tokens_per_sec: float
    train_mfu: float
    train_status: str
    train_steps: int
    train_profile: str = ""  # the device profile line `cem-ablate train` printed

    @property
    def ratio(self) -> float:
        return self.train_tokens_per_sec / self.bench_tokens_per_sec if self.bench_tokens_per_sec > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ratio": self.ratio}

    def markdown(self) -> str:
        return "\n".join(
            [
                "| case | bench tokens/s | train tokens/s | train / bench | train MFU |",
                "|---|---:|---:|---:|---:|",
                f"| {self.size} {self.variant} {self.mode} {self.precision}, batch {self.batch_size} x {self.seq_len}, "
                f"{self.device} | {self.bench_tokens_per_sec:,.0f} | {self.train_tokens_per_sec:,.0f} | "
                f"{self.ratio:.3f} | {self.train_mfu:.1%} |",
            ]
            + (["", f"`cem-ablate train`'s {self.train_profile}"] if self.train_profile else [])
        )


def train_config(
    variant: str,
    size: str,
    seq_len: int,
    batch_size: int,
    precision: str,
    mode: str,
    device: str,
    steps: int,
    vocab_size: int,
    log_every_n_steps: int,
) -> dict[str, Any]:
    """The run config that trains the bench case: same model, batch, precision, compile."""
    from cem_ablate.bench.variants import model_mapping, parse_variant
    from cem_ablate.training.config import TrainConfig
    from cem_ablate.training.device_profile import resolve_device_profile

    accelerator: Literal["cuda", "cpu"] = "cuda" if device.startswith("cuda") else "cpu"
    wanted = "bf16-mixed" if precision == "bf16" else "32-true"
    default = resolve_device_profile(TrainConfig(accelerator=accelerator)).precision
    mqar_vocab = min(vocab_size, 512)  # the data's ids; the model keeps the bench's vocabulary (head size)
    return {
        "name": f"parity-{size}-{variant}-{mode}-{precision}",
        "model": model_mapping(parse_variant(variant), size, seq_len, vocab_size),
        "train": {
            "lr": 1e-4,
            "batch_size": batch_size,
            "max_steps": steps,
            "warmup_frac": 0.0,
            "precision": "auto" if wanted == default else wanted,  # the user's default where it is the bench's
            "accelerator": accelerator,
            "compile": mode == "compiled",
            "val_every_n_steps": steps,
            "val_batches": 1,
            "test_batches": 1,
            "ckpt_every_n_steps": steps,
            "log_every_n_steps": log_every_n_steps,
        },
        "data": {
            "task": "mqar",
            "block_size": seq_len,
            "mqar": {
                "vocab_size": mqar_vocab,
                "num_kv_pairs": max(1, min(8, seq_len // 4, (mqar_vocab - 1) // 2)),
                "n_train": max(64, steps * batch_size),
                "n_val": batch_size,
                "n_test": batch_size,
            },
        },
    }


def measure_parity(
    variant: str = "llama",
    size: str = "86M",
    seq_len: int = 2048,
    batch_size: int = 8,
    precision: str = "bf16",
    mode: str = "compiled",
    device: str = "cuda",
    steps: int = 40,
    bench_repeats: int = 5,
    vocab_size: int = 32000,
    log_every_n_steps: int = 10,
    workdir: str | Path | None = None,
    log: Log = print,
) -> ParityResult:
    import torch

    from cem_ablate.bench.config import BenchConfig
    from cem_ablate.bench.runner import run_bench
    from cem_ablate.config.schema import parse
    from cem_ablate.training.config import parse_run_config

    bench_cfg = parse(
        BenchConfig,
        {
            "variants": [variant],
            "memory_variants": [],
            "sizes": [size],
            "modes": [mode],
            "precisions": [precision],
            "batch_size": batch_size,
            "seq_len": seq_len,
            "vocab_size": vocab_size,
            "device": device,
            "warmup_steps": 2,
            "repeats": bench_repeats,
            "steps_per_sample": 2,
            "peak": "cached",
            "tune_allocator": False,
        },
        "bench",
    )
    rows, _ = run_bench(bench_cfg, log=log)
    row = rows[0]
    if row.error:
        raise RuntimeError(f"the bench case failed: {row.error}")
    bench_rate = row.tokens_per_s_median
    log(f"[parity] bench: {bench_rate:,.0f} tokens/s (median of {len(row.step_s)} samples)")
    del rows, row
    torch._dynamo.reset()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()

    mapping = train_config(
        variant, size, seq_len, batch_size, precision, mode, device, steps, vocab_size, log_every_n_steps
    )
    parse_run_config(mapping)  # a bad case fails here, before a process starts
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        result, profile = train_command(mapping, Path(tmp), log)
    if result is None or result.status != TrialStatus.FINISHED:
        raise RuntimeError(
            f"`cem-ablate train` ended {result.status if result else 'without a result'}"
            f"{f': {result.error}' if result and result.error else ''}"
        )
    log(f"[parity] train: {result.tokens_per_sec:,.0f} tokens/s, MFU {result.mfu:.1%} ({result.steps} steps)")
    return ParityResult(
        variant=variant,
        size=size,
        mode=mode,
        precision=precision,
        device=device,
        batch_size=batch_size,
        seq_len=seq_len,
        bench_tokens_per_sec=bench_rate,
        train_tokens_per_sec=result.tokens_per_sec,
        train_mfu=result.mfu,
        train_status=result.status.value,
        train_steps=result.steps,
        train_profile=profile,
    )


def train_command(mapping: dict[str, Any], folder: Path, log: Log) -> tuple[TrainResult | None, str]:
    """Run `cem-ablate train` on `mapping` as a user would (its own process, a config file,
    an MLflow store); its result and the device profile line it printed."""
    import subprocess
    import sys

    import yaml

    from cem_ablate.training.run_directory import RunDirectory

    config_file, run_dir = folder / "parity.yaml", folder / "run"
    config_file.write_text(yaml.safe_dump(mapping, sort_keys=False))
    command = [
        sys.executable,
        "-m",
        "cem_ablate.cli.main",
        "train",
        str(config_file),
        "--run-dir",
        str(run_dir),
        "--tracking-uri",
        f"sqlite:///{folder / 'mlflow.db'}",
        "--no-progress",
        "--fresh",
    ]
    log(f"[parity] {' '.join(command[2:])}")
    done = subprocess.run(command, capture_output=True, text=True)
    for line in (done.stdout + done.stderr).splitlines()[-15:]:
        log(f"[parity] | {line}")
    profile = next((line for line in done.stdout.splitlines() if line.startswith("device profile:")), "")
    return RunDirectory(run_dir).read_result(), profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cem_ablate.bench.train_parity", description=__doc__.split("\n")[0])
    parser.add_argument("--variant", default="llama")
    parser.add_argument("--size", default="86M")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--mode", choices=["eager", "compiled"], default="compiled")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=40, help="training steps (the first is warm-up)")
    parser.add_argument("--repeats", type=int, default=5, help="bench samples (2 steps each)")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--log-every", type=int, default=10, help="the run's log_every_n_steps")
    parser.add_argument("--out", help="append the markdown table to this file")
    parser.add_argument("--json", help="write the result as JSON here")
    args = parser.parse_args(argv)
    result = measure_parity(
        args.variant,
        args.size,
        args.seq_len,
        args.batch_size,
        args.precision,
        args.mode,
        args.device,
        args.steps,
        args.repeats,
        args.vocab_size,
        args.log_every,
        log=lambda line: print(line, flush=True),
    )
    text = result.markdown()
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(f"\n## Training = bench (train / bench >= {PARITY_TARGET} on the GPU)\n\n{text}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
