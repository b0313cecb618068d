"""Every device-dependent choice of a training step, resolved in one place.

    profile = resolve_device_profile(train)                    # what this machine runs
    profile = resolve_device_profile(train, "cuda", device_has_bf16=True)  # what a bf16 GPU would run
    forced = profile.forcing(train)                            # those choices, explicit

The choices (docs/design/experiments.md#s7-1-device-profile): where the step runs, Lightning's
precision, AdamW's kernel, gradient clipping, compile, the head + loss implementation,
when the host reads the loss, and the distributed strategy. Training (`trainer_factory`,
`recipe`, `language_model`), the study's trials (through training) and the benchmark's
step all read them from here, so the bench cannot pass where training fails.

`forcing` turns a profile into a `TrainConfig` whose settings name every choice
explicitly: the CPU rehearsal of the CUDA profile (tests/training/test_device_profile.py)
trains with the CUDA choices on a CPU wherever CPU torch has them.

Kept free of Lightning imports: the bench imports it.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from cem_ablate.config import ConfigError
from cem_ablate.model.protocol import resolved_kernel
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.hardware import native_bf16
from cem_ablate.training.head_loss import LossImpl, resolve_loss_impl

# The host reads the training loss only on steps that log, validate, checkpoint or end the
# run (training.recipe): the one policy, on every device.
HOST_SYNC_POLICY = "check-steps"

OPTIMIZER_KERNELS = ("auto", "fused", "foreach", "single")
# The resolved choices (TrainConfig's settings without `auto`), as Lightning and torch name them.
Precision = Literal["32-true", "bf16-mixed", "bf16-true", "16-mixed"]
OptimizerKernel = Literal["fused", "foreach", "single"]
CompileBackend = Literal["inductor", "aot_eager", "eager"]


@dataclass(frozen=True)
class DeviceProfile:
    device_type: str  # where parameters live: cuda | cpu | mps
    accelerator: str  # Lightning's name for it: gpu | cpu | mps
    precision: Precision  # Lightning's precision: bf16-mixed | 32-true | ...
    optimizer_kernel: OptimizerKernel  # AdamW's implementation: fused | foreach | single
    grad_clip: float  # max global gradient norm, clipped by the module (0: none)
    compile: bool  # every block and the head + loss unit through torch.compile
    compile_backend: CompileBackend  # torch.compile's backend when compile is on: inductor | aot_eager | eager
    loss_impl: LossImpl  # head + loss: chunked | plain
    host_sync: str  # when the host reads the loss (HOST_SYNC_POLICY)
    strategy: str  # Lightning's strategy: auto (one process) | ddp
    ddp_backend: str | None  # the process group's backend under DDP: nccl | gloo

    def params(self) -> dict[str, str]:
        """The profile as MLflow params, `device.<choice>`."""
        return {f"device.{f.name}": str(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def describe(self) -> str:
        """`device profile: ` and the choices, as `cem-ablate train` prints them."""
        return f"device profile: {self.choices()}"

    def choices(self) -> str:
        clip = f"clip norm {self.grad_clip:g}" if self.grad_clip else "no clipping"
        ddp = f"{self.strategy} ({self.ddp_backend})" if self.ddp_backend else "one process"
        return (
            f"{self.device_type} ({self.accelerator}), precision {self.precision}, "
            f"AdamW {self.optimizer_kernel}, {clip}, "
            f"compile {f'on ({self.compile_backend})' if self.compile else 'off'}, "
            f"head + loss {self.loss_impl}, host reads the loss on {self.host_sync}, {ddp}"
        )

    def forcing(self, train: TrainConfig) -> TrainConfig:
        """`train` with every choice of this profile set explicitly (no `auto` left), to run
        a profile's choices on another device (the CPU rehearsal of the CUDA profile)."""
        return dataclasses.replace(
            train,
            precision=self.precision,
            optimizer_kernel=self.optimizer_kernel,
            compile=self.compile,
            compile_backend=self.compile_backend,
            loss_impl=self.loss_impl,
            grad_clip=self.grad_clip,
        )


def device_type_of(train: TrainConfig) -> str:
    """The device `train.accelerator` names, `auto` resolved on this machine."""
    if train.accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if train.accelerator == "gpu" else train.accelerator


def resolve_device_profile(
    train: TrainConfig, device_type: str | None = None, *, device_has_bf16: bool | None = None
) -> DeviceProfile:
    """Every choice `train` leaves to the device, resolved for `device_type` (default: the
    device `train.accelerator` gives on this machine). `device_has_bf16` says whether that
    device multiplies bf16 natively (default: ask this machine's GPU; a CPU is never given
    bf16 by `auto`). Raises ConfigError for a combination that cannot train."""
    device_type = device_type or device_type_of(train)
    if device_has_bf16 is None:
        device_has_bf16 = device_type == "cuda" and native_bf16("cuda")
    precision = resolve_precision(train.precision, device_type, device_has_bf16)
    kernel = resolve_optimizer_kernel(train.optimizer_kernel, device_type, precision, train.grad_clip)
    distributed = train.world_size > 1
    return DeviceProfile(
        device_type=device_type,
        accelerator="gpu" if device_type == "cuda" else device_type,
        precision=precision,
        optimizer_kernel=kernel,
        grad_clip=train.grad_clip,
        compile=train.compile,
        compile_backend=train.compile_backend,
        loss_impl=resolve_loss_impl(train.loss_impl, device_type),
        host_sync=HOST_SYNC_POLICY,
        strategy="ddp" if distributed else "auto",
        ddp_backend=("nccl" if device_type == "cuda" else "gloo") if distributed else None,
    )


def resolve_precision(precision: Precision | Literal["auto"], device_type: str, device_has_bf16: bool) -> Precision:
    """`auto`: bf16-mixed on a GPU that has bf16 (the paper's recipe), else fp32 (bf16 on a
    CPU is slower to converge for tiny models and noisy in speed)."""
    if precision != "auto":
        return precision
    return "bf16-mixed" if device_type == "cuda" and device_has_bf16 else "32-true"


def resolve_optimizer_kernel(
    kernel: OptimizerKernel | Literal["auto"], device_type: str, precision: str, grad_clip: float
) -> OptimizerKernel:
    """`auto`: `fused` on CUDA (one kernel for every parameter's update), except under
    fp16 mixed precision with clipping, which gets `foreach`: the fused kernel unscales fp16
    gradients itself, after a clip would have had to see them unscaled (an explicit
    `fused` there is refused by `TrainConfig.validate`). Elsewhere torch's own default, the
    `single`-tensor loop on CPU (earlier CPU results stay bit-identical)."""
    if kernel not in OPTIMIZER_KERNELS:
        raise ConfigError("train.optimizer_kernel", f"unknown kernel {kernel!r}; choose from {OPTIMIZER_KERNELS}.")
    fp16 = precision.startswith("16")
    if kernel != "auto":
        return kernel
    if device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters:
        return "foreach" if fp16 and grad_clip > 0 else "fused"
    return "single"


def adamw_kernel_options(kernel: str) -> dict[str, bool]:
    """torch.optim.AdamW's keyword arguments for a resolved kernel."""
    if kernel == "fused":
        return {"fused": True}
    if kernel == "foreach":
        return {"foreach": True}
    return {}


def attention_kernels(model: nn.Module, device_type: str) -> dict[str, str]:
    """The kernel each attention component of `model` runs on `device_type`, by component
    class (`model.protocol.resolved_kernel`: the component says, `torch` where it leaves the
    choice to torch, e.g. Llama's SDPA)."""
    device = torch.device(device_type)
    out: dict[str, str] = {}
    for block in getattr(model, "blocks", ()):
        attention = getattr(block, "attention", None)
        if isinstance(attention, nn.Module):
            out.setdefault(type(attention).__name__, resolved_kernel(attention, device))
    return out


def profile_params(profile: DeviceProfile, model: nn.Module | None = None) -> dict[str, Any]:
    """MLflow params of a run's profile, with the attention kernels its model runs."""
    params: dict[str, Any] = profile.params()
    if model is not None:
        params |= {
            f"device.attention.{name}": kernel for name, kernel in attention_kernels(model, profile.device_type).items()
        }
    return params
