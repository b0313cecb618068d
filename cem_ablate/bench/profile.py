"""Where a training step's time goes: a profile of a few steps of one bench case.

The bench's MFU says how far a step is from the device's peak, not why. The first GPU
bench's Llama step on one H100 stayed far below its MFU target compiled (measured:
benchmarks/README.md), and nobody could say whether the time
went to GEMMs, unfused elementwise passes, the fp32 cross-entropy, the optimizer or
an idle GPU waiting for Python. `profile_step` answers with `torch.profiler`:

- on CUDA, the kernels' own durations (what the device executed), grouped by kernel
  name and by category, and the *busy fraction*: kernel time / wall time. A busy
  fraction well below 1 means the GPU waits for the host (launch overhead, syncs),
  and no kernel work fixes that; near 1 it is the kernels themselves;
- on CPU, the ATen operators' self time (the CPU is the device).

Kernel time is summed over kernels: kernels that overlap on several streams are
counted twice, so the busy fraction can exceed 1 slightly; the bench runs one stream.

Shapes, FLOPs and a trace file say which operator to fix: operators are recorded with their
input shapes and FLOPs (`record_shapes`, `with_flops`); the FLOPs the profiler counts
(the ATen matmuls and a few elementwise ops it has formulas for, forward and backward)
are summed per step, and given a path the steps are written as a Chrome trace with
the shapes (chrome://tracing or https://ui.perfetto.dev; torch 2.13's exporter leaves
the FLOPs out). The bench writes one trace per profiled case beside its JSON
(`trace_file`). Recording shapes adds host time to every operator call, so an eager
GPU step's busy fraction reads somewhat lower than it would unrecorded (unmeasured).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.autograd import DeviceType

from cem_ablate.bench.measure import native_stderr_silenced, sync_device

# Categories by kernel/operator name, first match wins (names of cuBLAS/CUTLASS GEMMs,
# flash/memory-efficient/flex attention, inductor's Triton kernels, ATen ops).
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("attention", r"flash|fmha|attention|attn|flex|sdpa|_efficient_"),
    (
        "gemm",
        r"gemm|xmma|cutlass|nvjet|sm\d\d_|cublas|wgmma|tem_fused_.*mm"
        r"|aten::(mm|addmm|bmm|matmul|linear|baddbmm)$",
    ),
    ("loss", r"log_?softmax|nll_loss|cross_entropy"),
    ("optimizer", r"multi_tensor|adam|foreach|_fused_adamw|norm_kernel|clip"),
    ("fused (inductor)", r"^triton_|cpp_fused|compiled"),
    ("copy/cast", r"copy|memcpy|memset|cast|to_copy|fill"),
    (
        "views/allocation (no math)",
        r"aten::(view|t|transpose|reshape|expand|as_strided|permute|unsqueeze|squeeze"
        r"|slice|select|detach|empty|empty_like|zeros|zeros_like|alias|unbind|split"
        r"|chunk|contiguous|flatten|_unsafe_view|_reshape_alias|resolve_conj|lift_fresh)$",
    ),
)


def category(name: str) -> str:
    lowered = name.lower()
    for label, pattern in CATEGORIES:
        if re.search(pattern, lowered):
            return label
    return "other elementwise/reduction"


@dataclass
class ProfileEntry:
    name: str
    category: str
    ms_per_step: float
    share: float  # of the device time summed over all kernels/operators
    calls_per_step: float


@dataclass
class StepProfile:
    device: str  # cuda | cpu
    steps: int
    wall_ms_per_step: float
    device_ms_per_step: float  # kernels (CUDA) or operators' self time (CPU), summed
    by_category: dict[str, float] = field(default_factory=dict)  # ms per step
    top: list[ProfileEntry] = field(default_factory=list)
    flops_per_step: float = 0.0  # FLOPs of the ATen operators the profiler has formulas for (matmuls)
    trace: str | None = None  # the Chrome trace file of these steps, when one was written

    @property
    def busy_fraction(self) -> float:
        return self.device_ms_per_step / self.wall_ms_per_step if self.wall_ms_per_step > 0 else float("nan")

    def to_dict(self) -> dict:
        return asdict(self) | {"busy_fraction": self.busy_fraction}

    @classmethod
    def from_dict(cls, data: dict) -> StepProfile:
        data = {k: v for k, v in data.items() if k != "busy_fraction"}
        data["top"] = [ProfileEntry(**e) for e in data.get("top", [])]
        return cls(**data)


OPTIMIZER_RANGE = "bench/optimizer"  # record_function ranges of bench.train_step.TrainStep
LOSS_RANGE = "bench/loss"  # the head + loss unit's forward: final norm, LM head GEMM, cross-entropy


def _range_category(event) -> str | None:
    """On CPU an ATen op's name does not say whether AdamW called it (`aten::sqrt`):
    the TrainStep's record_function range above it does."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == OPTIMIZER_RANGE:
            return "optimizer"
        if parent.name == LOSS_RANGE:
            return "loss"
        parent = parent.cpu_parent
    return None


RANGE_CATEGORIES = {OPTIMIZER_RANGE: "optimizer", LOSS_RANGE: "loss"}


def _annotation_spans(events) -> list[tuple[float, float, str]]:
    """On CUDA, each record_function range also appears as a GPU-side annotation
    spanning the kernels launched inside it: (start us, end us, category) of ours."""
    return [
        (e.time_range.start, e.time_range.end, RANGE_CATEGORIES[e.name])
        for e in events
        if e.device_type == DeviceType.CUDA and e.name in RANGE_CATEGORIES
    ]


def _span_category(start: float, end: float, spans: list[tuple[float, float, str]]) -> str | None:
    """The category of the annotation span a kernel [start, end] lies in, if any."""
    for s0, s1, label in spans:
        if s0 <= start and end <= s1:
            return label
    return None


def _device_times(prof, on_cuda: bool) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], int]]:
    """Microseconds and calls per (name, category): CUDA kernels by their own duration,
    CPU ATen operators by their self time.

    On CUDA, GPU-side user annotations (record_function ranges, inductor's
    "## Call CompiledFxGraph ##" and the like) are spans, not kernels: counting them
    would count their kernels twice. Ours name the category of the kernels inside them
    (the head + loss unit's fused Triton kernels are "loss", not "fused (inductor)")."""
    events = prof.events()
    spans = _annotation_spans(events) if on_cuda else []
    micros: dict[tuple[str, str], float] = defaultdict(float)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    for event in events:
        if on_cuda:
            if (
                event.device_type != DeviceType.CUDA
                or getattr(event, "is_user_annotation", False)
                or event.name in RANGE_CATEGORIES
            ):
                continue
            start, end = event.time_range.start, event.time_range.end
            label = _span_category(start, end, spans) or category(event.name)
            key, us = (event.name, label), event.time_range.elapsed_us()
        else:
            if event.device_type != DeviceType.CPU or not event.name.startswith("aten::"):
                continue
            key, us = (event.name, _range_category(event) or category(event.name)), event.self_cpu_time_total
        micros[key] += us
        calls[key] += 1
    return micros, calls


def trace_file(prefix: str | Path, case: str) -> Path:
    """`<prefix>.<case>.trace.json`, the case label ('86M llama compiled bf16') made a
    file-name part: the bench's traces lie beside its `<prefix>.json`."""
    slug = re.sub(r"[^A-Za-z0-9_.]+", "-", case).strip("-")
    return Path(f"{prefix}.{slug}.trace.json")


def profile_step(
    step: Callable[[torch.Tensor], object],
    batch: torch.Tensor,
    steps: int = 3,
    top: int = 12,
    trace: str | Path | None = None,
) -> StepProfile:
    """Profile `steps` calls of an already warmed-up training step on `batch`; with
    `trace`, also write them there as a Chrome trace (shapes and FLOPs included)."""
    device = batch.device
    on_cuda = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync_device(device)
    prof = torch.profiler.profile(activities=activities, record_shapes=True, with_flops=True)
    with native_stderr_silenced():  # libkineto's "USDT ... profiler_start" lines
        prof.start()
    try:
        start = time.perf_counter()
        for _ in range(steps):
            step(batch)
        sync_device(device)
        wall = time.perf_counter() - start
    finally:
        with native_stderr_silenced():
            prof.stop()
    if trace is not None:
        Path(trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    micros, calls = _device_times(prof, on_cuda)
    total = sum(micros.values())
    by_category: dict[str, float] = defaultdict(float)
    for (_, label), us in micros.items():
        by_category[label] += us / 1e3 / steps
    ranked = sorted(micros.items(), key=lambda kv: -kv[1])[:top]
    entries = [
        ProfileEntry(
            name=name[:120],
            category=label,
            ms_per_step=us / 1e3 / steps,
            share=us / total if total else 0.0,
            calls_per_step=calls[(name, label)] / steps,
        )
        for (name, label), us in ranked
    ]
    return StepProfile(
        device=device.type,
        steps=steps,
        wall_ms_per_step=wall * 1e3 / steps,
        device_ms_per_step=total / 1e3 / steps,
        by_category=dict(sorted(by_category.items(), key=lambda kv: -kv[1])),
        top=entries,
        flops_per_step=_counted_flops(prof) / steps,
        trace=None if trace is None else str(trace),
    )


def _counted_flops(prof) -> float:
    """FLOPs of the CPU-side ATen operators (on CUDA: the ones that launched the kernels);
    composite operators (aten::linear, aten::matmul) count 0 and their mm/addmm the FLOPs."""
    return float(
        sum(e.flops or 0 for e in prof.events() if e.device_type == DeviceType.CPU and e.name.startswith("aten::"))
    )


def format_profile(label: str, profile: StepProfile) -> str:
    """Markdown: the categories and the top kernels/operators of one case."""
    unit = "kernel" if profile.device == "cuda" else "operator (self CPU)"
    lines = [
        f"#### {label}",
        "",
        f"{profile.wall_ms_per_step:.1f} ms per step (wall, profiler on, {profile.steps} steps); "
        f"{unit} time {profile.device_ms_per_step:.1f} ms = {profile.busy_fraction:.0%} of wall"
        + (" (the rest: the GPU waiting for the host)" if profile.device == "cuda" else ""),
        "",
        f"{profile.flops_per_step / 1e9:.3g} GFLOP per step counted by the profiler (its matmuls)"
        + (f"; Chrome trace with shapes: `{profile.trace}`" if profile.trace else ""),
        "",
        "| category | ms/step | share |",
        "|---|---:|---:|",
    ]
    total = profile.device_ms_per_step or float("nan")
    lines += [f"| {c} | {ms:.2f} | {ms / total:.0%} |" for c, ms in profile.by_category.items()]
    lines += ["", f"| top {unit} | category | ms/step | share | calls/step |", "|---|---|---:|---:|---:|"]
    lines += [
        f"| `{e.name[:70]}` | {e.category} | {e.ms_per_step:.2f} | {e.share:.0%} | {e.calls_per_step:g} |"
        for e in profile.top
    ]
    return "\n".join(lines)
