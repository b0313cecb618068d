"""Peak FLOP/s of a device, the denominator of MFU.

GPUs: a table of published dense (no sparsity) tensor-core peaks per precision.
CPUs have no published number worth trusting, so the peak is measured: a square
fp32 (or bf16) matmul, timed after a warm-up (cold runs read a third of the warm
value on this kind of machine), cached per process and in a file under the cache
directory keyed by (CPU model, threads, torch version, dtype), so trials do not each
spend seconds re-measuring.
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path

import torch
from filelock import FileLock

from cem_ablate.data.config import cache_root
from cem_ablate.training.torch_private import cpu_has_native_bf16

# Dense peak TFLOP/s: (bf16/fp16 tensor core, tf32 tensor core, plain fp32). Order
# matters: the first name found in the device name wins.
GPU_PEAK_TFLOPS: list[tuple[str, tuple[float, float, float]]] = [
    ("H100 PCIe", (756.0, 378.0, 51.0)),
    ("H100 NVL", (835.0, 418.0, 60.0)),
    ("H100", (989.0, 494.0, 67.0)),  # SXM ("NVIDIA H100 80GB HBM3")
    ("GH200", (989.0, 494.0, 67.0)),  # before "H200", which its name contains
    ("H200", (989.0, 494.0, 67.0)),  # same compute as the H100 SXM, more and faster memory
    ("B200", (2250.0, 1100.0, 80.0)),
    ("A100", (312.0, 156.0, 19.5)),
    ("A800", (312.0, 156.0, 19.5)),
    ("A6000", (154.8, 77.4, 38.7)),  # RTX A6000
    ("L40S", (362.0, 183.0, 91.6)),
    ("L40", (181.0, 90.5, 90.5)),
    ("A40", (149.7, 74.8, 37.4)),
    ("A10G", (70.0, 35.0, 31.2)),
    ("A10", (125.0, 62.5, 31.2)),
    ("L4", (121.0, 60.0, 30.3)),
    ("RTX 4090", (165.2, 82.6, 82.6)),
    ("RTX 3090", (71.0, 35.6, 35.6)),
    ("V100", (125.0, 15.7, 15.7)),  # fp16 tensor cores; no bf16, no tf32
    ("T4", (65.0, 8.1, 8.1)),
]

CPU_WARMUP_SECONDS = 2.0
CPU_MEASURE_SECONDS = 1.0
CPU_MATMUL_SIZE = 1024

_measured: dict[str, float] = {}


def native_bf16(device: str) -> bool:
    """Whether bf16 matmuls run natively: a CUDA GPU with bf16, or a CPU with
    AVX512-BF16/AMX (oneDNN's check). Elsewhere autocast emulates bf16, far slower
    than fp32."""
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return cpu_has_native_bf16()


def precision_kind(precision: str) -> str:
    """Lightning precision string -> 'half' (bf16/fp16) or 'fp32'."""
    return "half" if precision.startswith(("bf16", "16")) else "fp32"


def gpu_peak_flops(name: str, precision: str) -> float:
    for key, (half, tf32, fp32) in GPU_PEAK_TFLOPS:
        if key.lower() in name.lower():
            if precision_kind(precision) == "half":
                return half * 1e12
            uses_tf32 = torch.get_float32_matmul_precision() != "highest"
            return (tf32 if uses_tf32 else fp32) * 1e12
    return math.nan


def gpu_slug(name: str) -> str:
    """A short file-name form of a GPU: its peak-table key ('h100', 'h100-pcie'), else
    the sanitized device name ('NVIDIA GeForce RTX 2080' -> 'nvidia-geforce-rtx-2080')."""
    for key, _ in GPU_PEAK_TFLOPS:
        if key.lower() in name.lower():
            return key.lower().replace(" ", "-")
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split()) or "gpu"


def device_peak_flops(device: torch.device | str, precision: str) -> float:
    """Peak FLOP/s of one device at a precision; NaN for an unknown GPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device), precision)
    if device.type == "cpu":
        dtype = torch.bfloat16 if precision_kind(precision) == "half" else torch.float32
        return cpu_peak_flops(dtype)
    return math.nan


def total_peak_flops(device: str, precision: str, devices: int, num_nodes: int) -> float:
    """Peak of everything a run trains on. CPU "devices" are processes sharing one
    machine's cores, so a CPU node counts once, whatever the number of ranks on it."""
    per_device = device_peak_flops(device, precision)
    return per_device * num_nodes * (1 if torch.device(device).type == "cpu" else devices)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_peak_flops(dtype: torch.dtype = torch.float32, cache_dir: str | Path | None = None) -> float:
    key = f"{cpu_model()}|threads={torch.get_num_threads()}|torch={torch.__version__}|{dtype}"
    if key in _measured:
        return _measured[key]
    path = (Path(cache_dir) if cache_dir else cache_root()) / "hardware" / "cpu-peak.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        known = json.loads(path.read_text()) if path.exists() else {}
        if key not in known:
            known[key] = measure_matmul_flops(dtype)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=2))
            tmp.replace(path)
    _measured[key] = known[key]
    return known[key]


def measure_matmul_flops(
    dtype: torch.dtype = torch.float32,
    size: int = CPU_MATMUL_SIZE,
    warmup_s: float = CPU_WARMUP_SECONDS,
    measure_s: float = CPU_MEASURE_SECONDS,
) -> float:
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        torch.mm(a, b)
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < measure_s:
        torch.mm(a, b)
        n += 1
    return 2.0 * size**3 * n / elapsed
