"""What `cem-ablate bench` measures, validated once at the edge (ConfigError on bad input)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cem_ablate.bench.variants import SIZES, parse_variant
from cem_ablate.config.errors import unknown
from cem_ablate.config.schema import join, require
from cem_ablate.training.hardware import native_bf16

# The CPU comparison (results.SPEED_TARGETS): the external reference, the baseline, CEM attention and CEM
# MLP at T = 1 and 2 (paper defaults), and full CEM at T = 2 (Fig. 3a's model).
DEFAULT_VARIANTS = ("hf_llama", "llama", "cem_attn_t1", "cem_attn_t2", "cem_mlp_t1", "cem_mlp_t2", "cem_full_t2")
# Peak memory only (one profiled step each): recursion depth with and without
# per-step checkpointing, against T = 1 of the same model.
DEFAULT_MEMORY_VARIANTS = (
    "cem_full_t1",
    "cem_full_t2",
    "cem_full_t4",
    "cem_full_t2_ckpt",
    "cem_full_t4_ckpt",
    "cem_full_t8_ckpt",
)


@dataclass(frozen=True)
class BenchConfig:
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    memory_variants: list[str] = field(default_factory=lambda: list(DEFAULT_MEMORY_VARIANTS))
    sizes: list[str] = field(default_factory=lambda: ["bench"])
    # timed variants of particular sizes (a subset of `variants`); other sizes time all of them
    size_variants: dict[str, list[str]] = field(default_factory=dict)
    modes: list[Literal["eager", "compiled"]] = field(default_factory=lambda: ["eager", "compiled"])
    # None: fp32, plus bf16 where the device computes it natively (see `native_bf16`)
    precisions: list[Literal["fp32", "bf16"]] | None = None
    batch_size: int = 4
    seq_len: int = 512
    vocab_size: int = 32000
    warmup_steps: int = 2
    repeats: int = 10  # timed samples per case, interleaved across cases (ratios of equal-work cases
    #                   still move by a few % between runs on a shared host: benchmarks/README.md)
    steps_per_sample: int = 1
    device: str = "cpu"
    tune_allocator: bool = True
    peak: Literal["measure", "cached"] = "measure"  # CPU peak FLOP/s: measured during the run, or cached
    seed: int = 0
    profile_steps: int = 0  # > 0: profile that many steps of every timed case after timing (bench/profile.py)
    # with profile_steps: each profiled case's Chrome trace goes to <profile_trace>.<case>.trace.json
    # (`cem-ablate bench` sets it to the results JSON's path without .json)
    profile_trace: str | None = None

    def validate(self, path: str) -> None:
        for key in ("batch_size", "seq_len", "vocab_size", "repeats", "steps_per_sample"):
            require(getattr(self, key) >= 1, join(path, key), f"must be >= 1, got {getattr(self, key)}.")
        require(self.profile_steps >= 0, join(path, "profile_steps"), f"must be >= 0, got {self.profile_steps}.")
        require(
            self.warmup_steps >= 1,
            join(path, "warmup_steps"),
            "must be >= 1 (the first step allocates optimizer state and compiles).",
        )
        require(
            bool(self.variants) or bool(self.memory_variants),
            join(path, "variants"),
            "nothing to measure: give at least one variant or memory variant.",
        )
        require(bool(self.modes), join(path, "modes"), "needs at least one mode.")
        require(
            self.precisions is None or bool(self.precisions), join(path, "precisions"), "needs at least one precision."
        )
        for i, size in enumerate(self.sizes):
            if size not in SIZES:
                raise unknown(join(join(path, "sizes"), i), size, SIZES, what="size")
        for size, names in self.size_variants.items():
            require(size in self.sizes, join(join(path, "size_variants"), size), f"is not one of sizes {self.sizes}.")
            extra = [n for n in names if n not in self.variants]
            require(not extra, join(join(path, "size_variants"), size), f"{extra} are not among variants.")
        for key in ("variants", "memory_variants"):
            labels = [parse_variant(spec, join(join(path, key), i)).label for i, spec in enumerate(getattr(self, key))]
            require(len(labels) == len(set(labels)), join(path, key), f"duplicate variant labels in {labels}.")
        require(
            self.device in ("cpu", "cuda") or self.device.startswith("cuda:"),
            join(path, "device"),
            f"expected cpu or cuda[:i], got {self.device!r}.",
        )
        if self.device.startswith("cuda"):
            import torch

            require(
                torch.cuda.is_available(),
                join(path, "device"),
                f"{self.device} was asked for, but there is no CUDA device (torch.cuda.is_available() is "
                f"False; torch {torch.__version__}).",
            )
            index = int(self.device.partition(":")[2] or 0)
            require(
                index < torch.cuda.device_count(),
                join(path, "device"),
                f"{self.device}: there is no CUDA device {index} ({torch.cuda.device_count()} visible).",
            )


QUICK = {  # `--quick`: seconds, for tests and smoke checks
    "sizes": ["tiny"],
    "seq_len": 32,
    "batch_size": 2,
    "vocab_size": 256,
    "warmup_steps": 1,
    "repeats": 2,
    "modes": ["eager"],
    "precisions": ["fp32"],
    "variants": ["hf_llama", "llama", "cem_attn_t1", "cem_mlp_t2"],
    "memory_variants": ["cem_full_t1", "cem_full_t4_ckpt"],
}


# `--gpu`: the GPU bench. The paper's 86M and 162M at sequence 2048 in bf16
# (Lightning's bf16-mixed), eager and compiled, 8 sequences (16k tokens) per step.
# Targets: Llama compiled MFU, Llama vs HF Llama, CEM attention T = 1 and every T = 2
# variant vs Llama (the latter against its FLOP-bound ratio), T = 8 checkpointed
# memory vs T = 1 (results.evaluate_gpu_targets).
GPU = {
    "device": "cuda",
    "sizes": ["86M", "162M"],
    "seq_len": 2048,
    "batch_size": 8,
    "precisions": ["bf16"],
    "modes": ["eager", "compiled"],
    "warmup_steps": 2,
    "repeats": 5,
    "steps_per_sample": 2,
    # where the step's time goes (kernels by name and category, GPU busy fraction): MFU alone
    # cannot say why Llama stayed far below the MFU target on the first H100 run
    # (benchmarks/README.md)
    "profile_steps": 2,
    "variants": ["hf_llama", "llama", "cem_attn_t1", "cem_attn_t2", "cem_mlp_t1", "cem_mlp_t2", "cem_full_t2"],
    # 162M: the references, CEM attention T = 1 and full CEM T = 2 (each compiled case adds a slow compile)
    "size_variants": {"162M": ["hf_llama", "llama", "cem_attn_t1", "cem_full_t2"]},
    "memory_variants": ["cem_full_t1", "cem_full_t8_ckpt"],
}


def resolve_precisions(cfg: BenchConfig) -> list[str]:
    """The precisions to measure: as asked, else fp32 plus bf16 where it is native
    (emulated bf16 took many times the fp32 step on the 2-core AVX2 machine; measured:
    benchmarks/README.md)."""
    if cfg.precisions is not None:
        return list(cfg.precisions)
    return ["fp32", "bf16"] if native_bf16(cfg.device) else ["fp32"]
