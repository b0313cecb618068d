"""The one module that touches torch's private names.

Choosing a CPU's default precision needs to know whether its matmuls run bf16 natively
(AVX512-BF16 / AMX): oneDNN's own check, which torch exposes only as the private op
`torch.ops.mkldnn._is_mkldnn_bf16_supported`. Named once here and checked at first use:
a torch without it gets an answer of "emulated" (the CPU then keeps fp32, the safe
default) and one warning naming the version and the supported range, not an error in the
middle of a bench. Like `study/optuna_storage.py` and `training/lightning_private.py`.
"""

from __future__ import annotations

import warnings

import torch

SUPPORTED_TORCH = ">=2.4,<=2.14.1"  # the pin of pyproject.toml; the tests run on 2.13
MKLDNN_BF16 = "_is_mkldnn_bf16_supported"  # on torch.ops.mkldnn


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (oneDNN's check); False where torch cannot say."""
    try:
        probe = getattr(torch.ops.mkldnn, MKLDNN_BF16)
    except (AttributeError, RuntimeError):
        warnings.warn(
            f"torch {torch.__version__} has no torch.ops.mkldnn.{MKLDNN_BF16}: this CPU's bf16 counts as "
            f"emulated (cem_ablate/training/torch_private.py; supported torch{SUPPORTED_TORCH})",
            stacklevel=2,
        )
        return False
    return bool(probe())
