"""A run that runs out of device memory: an outcome with its numbers, not a crash.

On a GPU, a variant too large for the card (a deep recursion, a long sequence) raises
`torch.OutOfMemoryError` on some step. The engine records the run as failed with this
text as its reason: what the step asked for and what the device holds, so the report's
trial table says which trials did not fit and by how much, the worker frees the cached
memory, and the study goes on with its other trials.
"""

from __future__ import annotations

import re

import torch

OUT_OF_MEMORY = "out of device memory"  # how every such reason begins (reports and tests match it)

_ASKED = re.compile(r"Tried to allocate ([0-9.]+ [KMGT]?i?B)")


def is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError)


def out_of_memory_reason(err: BaseException, device_type: str) -> str:
    """`out of device memory: the step asked for 1.50 GiB more; the device has 79.2 GiB, 0.5 GiB
    free`, then torch's own first line."""
    message = str(err).strip()
    asked = _ASKED.search(message)
    asked_text = f"the step asked for {asked.group(1)} more" if asked else "the step's request is unknown"
    return f"{OUT_OF_MEMORY}: {asked_text}; {device_memory_text(device_type)} ({message.splitlines()[0]})"


def device_memory_text(device_type: str) -> str:
    """The device's total and free memory, where torch can say (CUDA)."""
    if device_type == "cuda" and torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        return f"the device has {total / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
    return f"the {device_type} device's memory is not known to torch"


def release_cached_memory(device_type: str) -> None:
    """Hand the failed run's cached blocks back, so the worker's next trial starts clean."""
    if device_type == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()
