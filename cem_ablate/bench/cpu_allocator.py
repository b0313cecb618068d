"""Keep large CPU tensors from paying page faults on every allocation.

glibc serves allocations above its mmap threshold (at most 32 MiB by default) with
fresh `mmap` pages and returns them to the OS on free, so every large tensor of a
training step (a (B, K, J, J) score block, the (B·J, |V|) logits) is page-faulted in
again at each step. On the 2-core benchmark machine that made large element-wise ops
and allocations several times slower (measured: benchmarks/README.md). Raising the
mmap and trim thresholds keeps freed memory in the heap for reuse, as jemalloc or
tcmalloc would; peak memory is unchanged, but the process does not give memory
back to the OS until it exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # glibc mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 30
TRIM_THRESHOLD_BYTES = (1 << 31) - 1

_tuned = False


def tune_cpu_allocator() -> bool:
    """Raise glibc's mmap/trim thresholds for this process; False where not glibc."""
    global _tuned
    if _tuned:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _tuned = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    return _tuned
