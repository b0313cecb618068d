"""CUDA tests: run with `pytest -m cuda tests/cuda` on a GPU machine.

Every test here is marked `cuda` and skipped with the reason "no CUDA device" where
torch sees no GPU, so the CPU suite collects and skips them. On a GPU they share one
inductor cache (the project's, `cem_ablate.bench.compile_cache`), and dynamo may
recompile the FlexAttention kernel once per score_mod variant x dtype: its default
limit of 8 recompiles per function would silently drop later cases to eager flex.
"""

from __future__ import annotations

import pytest
import torch

NO_CUDA = "no CUDA device"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=NO_CUDA)
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def cuda_session():
    if not torch.cuda.is_available():
        yield
        return
    import torch._dynamo.config as dynamo_config

    from cem_ablate.bench.compile_cache import configure_inductor_cache

    configure_inductor_cache()
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 256))
    yield


@pytest.fixture
def exact_fp32():
    """fp32 matmuls in full fp32 (no TF32) while a test compares against float64."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved[0]
    torch.set_float32_matmul_precision(saved[1])
