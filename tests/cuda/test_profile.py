"""The bench's step profile on CUDA: kernels by their own durations (issue 14)."""

from __future__ import annotations

import pytest
import torch

from cem_ablate.bench.profile import profile_step
from cem_ablate.bench.train_step import TrainStep, make_optimizer
from cem_ablate.model import build_model

pytestmark = pytest.mark.cuda


def test_a_cuda_step_profile_sees_its_kernels_and_the_busy_fraction():
    cuda = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model({"size": "tiny", "vocab_size": 256, "max_seq_len": 64}).to(cuda)
    step = TrainStep(model, model, make_optimizer(model), "bf16", cuda)
    batch = torch.randint(0, 256, (4, 65), device=cuda)
    step(batch)
    profile = profile_step(step, batch, steps=3)
    assert profile.device == "cuda" and profile.device_ms_per_step > 0
    assert 0 < profile.busy_fraction < 1.5  # summed kernel time; one stream, so at most ~1
    assert profile.by_category.get("gemm", 0) > 0 and profile.by_category.get("loss", 0) > 0, profile.by_category
    assert profile.by_category.get("optimizer", 0) > 0, profile.by_category
    assert not any(e.name.startswith("aten::") for e in profile.top)  # kernels, not operators
