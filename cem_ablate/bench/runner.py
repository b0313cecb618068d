"""Run a benchmark: build every case, warm up, time side by side, measure memory.

For each size and precision, all timed variants are built in one process (each
model once; its eager and compiled steps share weights and optimizer), warmed up,
then timed round-robin (measure.py), then profiled when asked (profile.py). Memory-only
variants follow, one at a time.
A case that fails (e.g. a graph break under fullgraph compile) becomes a row with
its error instead of stopping the run.
"""

from __future__ import annotations

import datetime
import gc
import math
import platform
import subprocess
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from cem_ablate.bench.config import BenchConfig, native_bf16, resolve_precisions
from cem_ablate.bench.measure import CPUContention, step_peak_bytes, time_interleaved, warm_up
from cem_ablate.bench.profile import profile_step, trace_file
from cem_ablate.bench.results import Row
from cem_ablate.bench.train_step import TrainStep, compiled_forward, head_loss_for, hf_forward, make_optimizer
from cem_ablate.bench.variants import BASELINE, Variant, model_mapping, parse_variant
from cem_ablate.model import build_model, model_report, parse_model_config
from cem_ablate.model.protocol import resolved_kernel

Log = Callable[[str], None]


def precision_name(precision: str) -> str:
    """Our precision flag -> the Lightning string `device_peak_flops` takes."""
    return "bf16-mixed" if precision == "bf16" else "32-true"


class Case:
    """One (variant, mode) of a size and precision: a row and the step that fills it."""

    def __init__(self, row: Row, step: TrainStep | None):
        self.row, self.step = row, step


def _build_model(variant: Variant, cfg: BenchConfig, size: str, device: torch.device):
    """(model, (forward, head + loss unit) factory per mode, FLOP-report source); HF runs
    eager only (the reference target is eager) on its own logits with the plain
    cross-entropy, and its FLOPs are those of the identical baseline."""
    torch.manual_seed(cfg.seed)
    if variant.external:
        from cem_ablate.interop import to_hf_llama

        baseline = parse_model_config(model_mapping(Variant(BASELINE, {}), size, cfg.seq_len, cfg.vocab_size))
        llama = build_model(baseline)
        model = to_hf_llama(llama)
        model.set_attn_implementation("sdpa")  # the external reference runs torch SDPA (transformers >= 5)
        model = model.to(device).train()
        return model, {"eager": lambda: (hf_forward(model), None)}, llama
    config = parse_model_config(model_mapping(variant, size, cfg.seq_len, cfg.vocab_size))
    model = build_model(config).to(device).train()
    return (
        model,
        {
            "eager": lambda: (model.hidden_states, head_loss_for(model, device, compiled=False)),
            "compiled": lambda: (compiled_forward(model), head_loss_for(model, device, compiled=True)),
        },
        model,
    )


def build_cases(
    variants: list[Variant],
    modes: list[str],
    cfg: BenchConfig,
    size: str,
    precision: str,
    device: torch.device,
    memory_only: bool = False,
) -> list[Case]:
    cases = []
    for variant in variants:
        try:
            model, forwards, flop_source = _build_model(variant, cfg, size, device)
            report = model_report(flop_source, cfg.seq_len)
            optimizer = make_optimizer(model)
        except Exception as err:  # noqa: BLE001  a variant that cannot be built still gets its row (its error)
            cases.append(
                Case(_row(variant, "eager", cfg, size, precision, 0, math.nan, memory_only, error=_short(err)), None)
            )
            continue
        for mode in modes:
            if mode not in forwards:
                continue
            forward, head_loss = forwards[mode]()
            row = _row(
                variant, mode, cfg, size, precision, report.params_total, report.train_flops_per_token, memory_only
            )
            cases.append(Case(row, TrainStep(model, forward, optimizer, precision, device, head_loss)))
    return cases


def _row(variant, mode, cfg, size, precision, params, flops, memory_only, error=None) -> Row:
    return Row(
        size=size,
        variant=variant.label,
        mode=mode,
        precision=precision,
        tokens_per_step=cfg.batch_size * cfg.seq_len,
        params=params,
        train_flops_per_token=flops,
        memory_only=memory_only,
        error=error,
    )


def _short(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()[0]
    return text[:300]


def _safely(case: Case, action: Callable[[], Any], log: Log) -> Any:
    try:
        return action()
    except Exception as err:  # noqa: BLE001  one case's failure is its row's error; the bench goes on
        case.row.error = _short(err)
        case.step = None
        log(f"  {case.row.variant} ({case.row.mode}): failed: {case.row.error}")
        return None


class PeakMeter:
    """The device's peak FLOP/s for a precision, the denominator of MFU.

    GPUs: the published peak (`device_peak_flops`). CPUs: the matmul throughput
    measured by `training.hardware.measure_matmul_flops`, sampled at the start and
    after every timed round, keeping the highest: on a shared machine a single
    measurement taken in a busy moment would understate the peak and inflate MFU.
    With `peak: cached` the per-machine cached value of `device_peak_flops` is used.
    """

    def __init__(self, device: torch.device, precision: str, cached: bool):
        from cem_ablate.training.hardware import device_peak_flops

        self.device, self.precision = device, precision
        self.measured = device.type == "cpu" and not cached
        self.samples: list[float] = []
        if not self.measured:
            self.samples.append(device_peak_flops(device, precision_name(precision)))
        else:
            self.sample(warmup_s=2.0, measure_s=1.0)

    def sample(self, warmup_s: float = 0.2, measure_s: float = 0.5) -> None:
        if self.measured:
            from cem_ablate.training.hardware import measure_matmul_flops

            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
            self.samples.append(measure_matmul_flops(dtype, warmup_s=warmup_s, measure_s=measure_s))

    @property
    def peak(self) -> float:
        return max(self.samples)


def run_bench(cfg: BenchConfig, log: Log = print) -> tuple[list[Row], dict[str, Any]]:
    from cem_ablate.bench.compile_cache import configure_inductor_cache
    from cem_ablate.bench.cpu_allocator import tune_cpu_allocator

    warnings.filterwarnings("ignore", message=".*_prims_common.check.*", category=FutureWarning)  # inductor noise
    device = torch.device(cfg.device)
    meta = machine_facts(cfg, device)
    meta["allocator_tuned"] = tune_cpu_allocator() if cfg.tune_allocator and device.type == "cpu" else False
    if "compiled" in cfg.modes:
        meta["inductor_cache"] = str(configure_inductor_cache())
    timed = [parse_variant(v) for v in cfg.variants]
    memory = [parse_variant(v) for v in cfg.memory_variants]
    precisions = resolve_precisions(cfg)
    meta["precisions"] = precisions
    if "bf16" in precisions and not native_bf16(cfg.device):
        log("[bench] note: this device has no native bf16; bf16 steps are emulated and very slow")
    elif cfg.precisions is None and precisions == ["fp32"]:
        log("[bench] fp32 only: this device has no native bf16 (ask for it with --precisions fp32 bf16)")
    meta["attention_kernels"] = {v.label: attention_kernel(v, device, cfg.sizes[0]) for v in timed + memory}
    _raise_recompile_limits()
    rows: list[Row] = []
    for size in cfg.sizes:
        sized = [v for v in timed if v.label in cfg.size_variants[size]] if size in cfg.size_variants else timed
        torch._dynamo.reset()  # each size compiles its own graphs; nothing carries over
        for precision in precisions:
            meter = PeakMeter(device, precision, cached=cfg.peak == "cached")
            generator = torch.Generator().manual_seed(cfg.seed)
            batch = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.seq_len + 1), generator=generator)
            batch = batch.to(device)
            log(f"[bench] size {size}, {precision}")
            group: list[Row] = []
            if sized:
                group += _run_timed(sized, cfg, size, precision, device, meter, batch, log)
            for variant in memory:
                group += _run_memory_only(variant, cfg, size, precision, device, batch, log)
            for row in group:
                row.peak_flops = meter.peak
            log(f"  peak {meter.peak / 1e9:.0f} GFLOP/s (max of {len(meter.samples)} samples)")
            meta.setdefault("peak_flops", {})[f"{size}/{precision}"] = {
                "peak": meter.peak,
                "samples": meter.samples,
                "source": "measured matmul (max of samples)" if meter.measured else "device_peak_flops",
            }
            rows += group
    return rows, meta


def _raise_recompile_limits(limit: int = 64) -> None:
    """One bench process compiles many models whose blocks share `Block.forward`, and
    dynamo counts recompiles per code object: past its limit (8) it would run the
    remaining variants' blocks eagerly, unannounced, and time the wrong thing."""
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), limit))


def _graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _run_timed(variants, cfg, size, precision, device, meter, batch, log) -> list[Row]:
    import time

    cases = build_cases(variants, cfg.modes, cfg, size, precision, device)
    for case in cases:
        if case.step is None:
            continue
        graphs = _graphs_compiled()
        seconds = _safely(case, partial(warm_up, case.step, batch, cfg.warmup_steps), log)
        if seconds is not None:
            case.row.warmup_s = seconds
            log(
                f"  warm-up {case.row.variant:<22} {case.row.mode:<8} {seconds:6.1f} s  "
                f"({_graphs_compiled() - graphs} graphs compiled)"
            )
    live = [c for c in cases if c.step is not None]
    graphs, round_start = _graphs_compiled(), [time.perf_counter()]

    def on_round(r: int) -> None:
        meter.sample()
        now = time.perf_counter()
        log(f"  timed round {r + 1}/{cfg.repeats}: {now - round_start[0]:.1f} s")
        round_start[0] = now

    with CPUContention() as contention:
        timings = time_interleaved(
            [c.step for c in live if c.step is not None], batch, cfg.repeats, cfg.steps_per_sample, on_round=on_round
        )
    if (recompiled := _graphs_compiled() - graphs) > 0:
        log(f"  warning: {recompiled} graphs were compiled while timing (recompilation): those steps are slow")
    if contention.share is not None:
        log(f"  CPU contention while timing: {contention.share:.0%} of the time a task waited for a CPU")
    for case in cases:
        case.row.cpu_contention = contention.share
    for case, timing in zip(live, timings):
        case.row.step_s = timing.samples
    for case in live:
        assert case.step is not None  # `live` keeps the cases with a step
        case.row.state_bytes = case.step.state_bytes()
        case.row.step_peak_bytes = _safely(case, partial(step_peak_bytes, case.step, batch), log)
    if cfg.profile_steps:
        for case in [c for c in live if c.step is not None]:
            assert case.step is not None  # the list keeps the cases with a step
            label = f"{case.row.size} {case.row.variant} {case.row.mode} {case.row.precision}"
            trace = trace_file(cfg.profile_trace, label) if cfg.profile_trace else None
            profile = _safely(case, partial(profile_step, case.step, batch, cfg.profile_steps, trace=trace), log)
            if profile is not None:
                case.row.profile = profile.to_dict()
                top = profile.top[0] if profile.top else None
                log(
                    f"  profile {case.row.variant:<22} {case.row.mode:<8} busy {profile.busy_fraction:4.0%}; "
                    f"top: {top.category if top else '-'} {top.share if top else 0:.0%}"
                )
    rows = [c.row for c in cases]
    del cases, live
    gc.collect()
    return rows


def _run_memory_only(variant, cfg, size, precision, device, batch, log) -> list[Row]:
    cases = build_cases([variant], ["eager"], cfg, size, precision, device, memory_only=True)
    for case in cases:
        if case.step is None:
            continue
        if _safely(case, partial(warm_up, case.step, batch, 1), log) is None:  # allocates AdamW state
            continue
        case.row.state_bytes = case.step.state_bytes()
        case.row.step_peak_bytes = _safely(case, partial(step_peak_bytes, case.step, batch), log)
        if case.row.peak_bytes is not None:
            log(f"  memory  {case.row.variant:<22} peak {case.row.peak_bytes / 2**20:8.0f} MB")
    rows = [c.row for c in cases]
    del cases
    gc.collect()
    return rows


def attention_kernel(variant: Variant, device: torch.device, size: str = "bench") -> str:
    """Which attention kernel a variant runs on the device: sdpa for Llama, else what its
    attention component resolves (`protocol.resolved_kernel`; CEM: flex / blocked / sdpa,
    `kernel: auto` resolved for the head width of `size`)."""
    attention = variant.sublayers.get("attention")
    if not attention or attention.get("name", "llama") == "llama":
        return "sdpa (torch)"
    if attention.get("impl") == "reference":
        return "reference (explicit scores)"
    config = parse_model_config(model_mapping(variant, size, seq_len=16, vocab_size=16))
    sub = config.attention
    return resolved_kernel(sub.spec.factory(config.dims, sub.options, sub.recursion_steps), device)


def machine_facts(cfg: BenchConfig, device: torch.device) -> dict[str, Any]:
    from cem_ablate.bench.train_step import RECIPE
    from cem_ablate.config.schema import to_dict
    from cem_ablate.training.device_profile import resolve_device_profile
    from cem_ablate.training.hardware import cpu_model

    facts: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "config": to_dict(cfg),
        "git_commit": _git_commit(),
        "step": "forward + head and cross-entropy (fp32 logits; training.head_loss) + backward + clip + AdamW "
        "(docs/design/experiments.md#s7-training-recipe), the training recipe's; compiled = each block and the head + loss unit "
        "torch.compile(fullgraph=True)",
        "device_profile": resolve_device_profile(RECIPE, device.type).params(),
        "memory_method": "torch.profiler memory events (CPU) / max_memory_allocated (CUDA); "
        "peak = weights + AdamW state + peak allocated inside the step",
    }
    try:
        import transformers

        facts["transformers"] = transformers.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        from cem_ablate.training.hardware import gpu_peak_flops

        props = torch.cuda.get_device_properties(device)
        name = torch.cuda.get_device_name(device)
        facts.update(
            gpu=name,
            cuda=torch.version.cuda,
            gpu_capability=f"{props.major}.{props.minor}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            gpu_multiprocessors=props.multi_processor_count,
            gpu_peak_bf16_tflops=gpu_peak_flops(name, "bf16-mixed") / 1e12,
        )
        try:
            import triton

            facts["triton"] = triton.__version__
        except ImportError:
            pass
    return facts


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
