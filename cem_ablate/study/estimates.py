"""What a variant costs, known before training: parameters, FLOPs, tokens, GPU-hours.

Parameters and forward FLOPs per token come from `model_report` (recursion steps
counted T times); training FLOPs per token are 3x forward (SPEC §7 recipe, backward
= 2x forward). The token budget is the training engine's own resolution
(`resolve_run`: max_steps, a token count, or Chinchilla = 20 x the Llama baseline's
parameters). GPU-hours assume a dense bf16 peak and an MFU, both options
of `cem-ablate study --dry-run` (defaults: A100, 312 TFLOP/s, 40% MFU).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_GPU_TFLOPS = 312.0  # A100 dense bf16
DEFAULT_MFU = 0.40
# Training FLOPs per second of a CPU study on 2 cores, measured end to end: the
# quickstart's 15 trials' training FLOPs (by this module) over their wall time on 2
# otherwise idle cores (the quickstart time docs/getting-started.md gives), each trial's startup and
# evaluation included. Conservative for larger models, whose fixed costs weigh less.
CPU_TRAIN_FLOPS_PER_S = 3.59e12 / 137.0


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
        out = {"params_total": self.params_total, "llama_baseline_params": self.llama_baseline_params,
               "flops_per_token": self.flops_per_token, "train_flops_per_token": self.train_flops_per_token,
               "tokens_per_trial": self.tokens, "steps_per_trial": self.steps}
        out.update({f"params_{k}": v for k, v in self.params_by_component.items()})
        return {k: float(v) for k, v in out.items()}


def estimate(run_config) -> VariantEstimate:
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
