"""The bench's step profile on CUDA: kernels by their own durations."""

from __future__ import annotations

import pytest
import torch

from cem_ablate import build_model
from cem_ablate.bench.profile import profile_step
from cem_ablate.bench.train_step import TrainStep, make_optimizer

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


def test_the_head_and_loss_units_kernels_count_as_loss_not_twice():
    """The chunked unit's kernels (logsumexp, exp, GEMMs) fall in the step's loss range,
    and the GPU-side annotations are not counted as kernels (busy fraction <= ~1).
    NOT YET RUN on a GPU (written without one)."""
    from cem_ablate.bench.train_step import head_loss_for

    cuda = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model({"size": "tiny", "vocab_size": 4096, "max_seq_len": 64}).to(cuda)
    step = TrainStep(
        model, model.hidden_states, make_optimizer(model), "bf16", cuda, head_loss_for(model, cuda, compiled=False)
    )
    batch = torch.randint(0, 4096, (4, 65), device=cuda)
    step(batch)
    profile = profile_step(step, batch, steps=3)
    assert profile.by_category.get("loss", 0) > 0, profile.by_category
    assert profile.busy_fraction < 1.2
    assert not any(e.name.startswith(("bench/", "## Call")) for e in profile.top)
