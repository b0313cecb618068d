"""What a variant costs, known before training: parameters, FLOPs, tokens, GPU-hours.

Parameters and forward FLOPs per token come from `model_report` (recursion steps
counted T times); training FLOPs per token are 3x forward (docs/design/experiments.md#s7-training-recipe recipe, backward
= 2x forward). The token budget is the training engine's own resolution
(`resolve_run`: max_steps, a token count, or Chinchilla = 20 x the Llama baseline's
parameters). GPU-hours assume a dense bf16 peak and an MFU, both options
of `cem-ablate study --dry-run` (defaults: A100, 312 TFLOP/s, 40% MFU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cem_ablate.training.config import RunConfig

DEFAULT_GPU_TFLOPS = 312.0  # A100 dense bf16
DEFAULT_MFU = 0.40
# Training FLOPs per second of a CPU study on 2 cores, measured end to end: the
# quickstart's 15 trials' training FLOPs (by this module) over their wall time on 2
# otherwise idle cores (the quickstart time docs/getting-started.md gives), each trial's startup and
# evaluation included. Conservative for larger models, whose fixed costs weigh less.
CPU_TRAIN_FLOPS_PER_S = 3.59e12 / 137.0


@dataclass(frozen=True)
class GpuRate:
    """What a GPU delivers: its dense bf16 peak and the share of it a run achieves (MFU),
    assumed (the defaults) or measured by `cem-ablate bench` (`measured_rate`)."""

    tflops: float = DEFAULT_GPU_TFLOPS
    mfu: float = DEFAULT_MFU
    source: str = ""  # where a measured MFU comes from

    def gpu_hours(self, flops: float) -> float:
        return flops / (self.tflops * 1e12 * self.mfu) / 3600.0

    def describe(self) -> str:
        return f"{self.tflops:g} TFLOP/s and {self.mfu * 100:.3g}% MFU" + (f" ({self.source})" if self.source else "")


def measured_rate(path: str, compiled: bool) -> GpuRate:
    """The rate of a `cem-ablate bench` results file (bench/results.py): its GPU's bf16 peak and
    the Llama baseline's median MFU in the mode the studies train in (`train.compile`), bf16,
    over the sizes it measured; the other variants' MFU range in that mode is named beside it."""
    import statistics

    from cem_ablate.bench.results import read_json
    from cem_ablate.config import ConfigError

    try:
        rows, meta = read_json(path)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError("--bench", f"{path} is not a results file of cem-ablate bench ({err}).") from None
    mode = "compiled" if compiled else "eager"
    timed = [
        r
        for r in rows
        if r.mode == mode
        and r.precision == "bf16"
        and not r.error
        and not r.memory_only
        and r.step_s
        and r.peak_flops
        and r.peak_flops == r.peak_flops
    ]
    llama = [r for r in timed if r.variant == "llama"]
    if not llama:
        raise ConfigError(
            "--bench",
            f"{path} has no timed bf16 {mode} row of llama (the mode the studies train "
            "in: train.compile); run cem-ablate bench on the GPU with that mode.",
        )
    mfu = statistics.median(r.mfu for r in llama)
    others = sorted(r.mfu for r in timed)
    gpu = meta.get("gpu") or meta.get("device") or "its device"
    source = (
        f"{gpu}, llama {mode} bf16 at {', '.join(sorted({r.size for r in llama}))}, {path}; every variant "
        f"there {others[0]:.1%}-{others[-1]:.1%}"
    )
    return GpuRate(llama[0].peak_flops / 1e12, mfu, source)


@dataclass(frozen=True)
class VariantEstimate:
    params_total: int
    params_by_component: dict[str, int]
    llama_baseline_params: int
    flops_per_token: float  # forward
    train_flops_per_token: float  # forward + backward (model/report.py: truncated backprop counts less)
    tokens: int  # per trial
    steps: int  # optimizer steps per trial
    budget_rule: str

    @property
    def train_flops(self) -> float:
        """Training FLOPs of one trial."""
        return self.train_flops_per_token * self.tokens

    def gpu_hours(self, gpu_tflops: float = DEFAULT_GPU_TFLOPS, mfu: float = DEFAULT_MFU) -> float:
        return self.train_flops / (gpu_tflops * 1e12 * mfu) / 3600.0

    def cpu_hours(self, flops_per_s: float = CPU_TRAIN_FLOPS_PER_S) -> float:
        """Wall-clock hours of one trial on the 2-core machine `CPU_TRAIN_FLOPS_PER_S` was measured on."""
        return self.train_flops / flops_per_s / 3600.0

    def metrics(self) -> dict[str, float]:
        """For the variant's parent run."""
        out = {
            "params_total": self.params_total,
            "llama_baseline_params": self.llama_baseline_params,
            "flops_per_token": self.flops_per_token,
            "train_flops_per_token": self.train_flops_per_token,
            "tokens_per_trial": self.tokens,
            "steps_per_trial": self.steps,
        }
        out.update({f"params_{k}": v for k, v in self.params_by_component.items()})
        return {k: float(v) for k, v in out.items()}


def estimate(run_config: RunConfig) -> VariantEstimate:
    """The engine's own resolution of a run (model on the meta device: no memory, no init)."""
    from cem_ablate.model.config import llama_baseline_params
    from cem_ablate.training.engine import resolve_run

    resolved = resolve_run(run_config)
    report, budget = resolved.report, resolved.budget
    return VariantEstimate(
        params_total=report.params_total,
        params_by_component=dict(report.params_by_component),
        llama_baseline_params=llama_baseline_params(run_config.training_model()),
        flops_per_token=report.flops_per_token,
        train_flops_per_token=report.train_flops_per_token,
        tokens=budget.tokens,
        steps=budget.steps,
        budget_rule=budget.rule,
    )
