"""Timing and peak memory of training steps.

Timing: every case is warmed up (optimizer state allocated, graphs compiled), then
the cases are timed round-robin, one sample per case per round with the order
rotated each round, so that a noisy neighbour or a frequency change hits all cases
alike; the median and the minimum of the samples are reported.

Peak memory on CPU: PyTorch has no CPU allocator statistics (no counterpart of
`torch.cuda.max_memory_allocated`), and RSS mixes in the Python heap and glibc's
caching. The profiler's memory events do see every tensor allocation and free with
the running total (`total_allocated`), so one step is run under
`torch.profiler.profile(profile_memory=True)` and the peak of that running total is
the step's peak on top of what was held when it began (weights and AdamW state; the
gradients are allocated inside the step and counted). On CUDA the allocator's own
peak counter is used.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass
class Timing:
    samples: list[float]  # seconds per step

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)


def sync_device(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); a no-op on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warm_up(step: Callable[[torch.Tensor], object], batch: torch.Tensor, steps: int) -> float:
    """Run `steps` steps; returns the seconds they took (compile time included)."""
    start = time.perf_counter()
    for _ in range(steps):
        step(batch)
    sync_device(batch.device)
    return time.perf_counter() - start


def time_interleaved(
    steps: Sequence[Callable[[torch.Tensor], object]],
    batch: torch.Tensor,
    repeats: int,
    steps_per_sample: int = 1,
    on_round: Callable[[int], None] | None = None,
) -> list[Timing]:
    """Seconds per step of each callable, sampled round-robin `repeats` times."""
    samples: list[list[float]] = [[] for _ in steps]
    n = len(steps)
    for r in range(repeats):
        for k in range(n):
            i = (k + r) % n  # rotate the order so no case always runs first
            sync_device(batch.device)
            start = time.perf_counter()
            for _ in range(steps_per_sample):
                steps[i](batch)
            sync_device(batch.device)
            samples[i].append((time.perf_counter() - start) / steps_per_sample)
        if on_round:
            on_round(r)
    return [Timing(s) for s in samples]


def step_peak_bytes(step: Callable[[torch.Tensor], object], batch: torch.Tensor) -> int:
    """Peak bytes allocated during one step above what was allocated when it began."""
    if batch.device.type == "cuda":
        torch.cuda.synchronize(batch.device)
        torch.cuda.reset_peak_memory_stats(batch.device)
        start = torch.cuda.memory_allocated(batch.device)
        step(batch)
        torch.cuda.synchronize(batch.device)
        return torch.cuda.max_memory_allocated(batch.device) - start
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with native_stderr_silenced():  # libkineto prints "USDT ... profiler_start" lines there
        prof.start()
    try:
        step(batch)
    finally:
        with native_stderr_silenced():
            prof.stop()
    # prof.stop() has filled both (torch types them Optional for a profiler not yet run)
    assert prof.profiler is not None and prof.profiler.kineto_results is not None
    totals = [
        (node.start_time_ns, node.typed[1].total_allocated)
        for node in _walk(prof.profiler.kineto_results.experimental_event_tree())
        if node.typed[0] == _EventType.Allocation
    ]
    return max((total for _, total in sorted(totals)), default=0)


@contextlib.contextmanager
def native_stderr_silenced():
    """Point file descriptor 2 at /dev/null for the block: native libraries write to it
    directly, past Python's sys.stderr."""
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (e.g. a daemon): nothing to silence
        yield
        return
    try:
        sys.stderr.flush()
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _walk(nodes):
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


class CPUContention:
    """Share of wall time in which some runnable task waited for a CPU (Linux PSI,
    /proc/pressure/cpu "some"), over a `with` block; None where PSI is unavailable.

    The benchmark's own threads fit the cores, so a high share means other processes
    competed for them: step times, and a matmul peak measured meanwhile, are then
    inflated and jittery, and ratios and MFU from such a run are unreliable.
    """

    PATH = "/proc/pressure/cpu"

    def __init__(self) -> None:
        self.share: float | None = None

    @classmethod
    def _stall_us(cls) -> float | None:
        try:
            with open(cls.PATH) as f:
                some = f.readline().split()
            return float(dict(kv.split("=") for kv in some[1:])["total"])
        except (OSError, KeyError, ValueError, IndexError):
            return None

    def __enter__(self):
        self._start = (self._stall_us(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        stall, wall = self._stall_us(), time.perf_counter()
        if stall is not None and self._start[0] is not None and wall > self._start[1]:
            self.share = (stall - self._start[0]) / 1e6 / (wall - self._start[1])
        return False
