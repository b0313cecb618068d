"""training/optimizer.py: the one place that picks AdamW's kernel (issue 20)."""

from __future__ import annotations

import torch

from cem_ablate.bench.train_step import make_optimizer
from cem_ablate.model import build_model
from cem_ablate.training.optimizer import adamw_kernel_options, build_adamw, parameters_device


def test_cuda_gets_the_fused_kernel_and_the_cpu_keeps_torchs_default():
    assert adamw_kernel_options("cuda") == {"fused": True}
    assert adamw_kernel_options(torch.device("cuda", 1)) == {"fused": True}
    assert adamw_kernel_options("cpu") == {}  # unchanged: the CPU results of earlier versions stand
    assert adamw_kernel_options(torch.device("meta")) == {}


def test_cpu_adamw_is_bit_identical_to_a_plain_adamw():
    torch.manual_seed(0)
    a = torch.nn.Linear(5, 3)
    b = torch.nn.Linear(5, 3)
    b.load_state_dict(a.state_dict())
    ours = build_adamw([{"params": list(a.parameters()), "weight_decay": 0.1}], lr=1e-2, betas=(0.9, 0.95),
                       eps=1e-9, device=parameters_device(a))
    plain = torch.optim.AdamW([{"params": list(b.parameters()), "weight_decay": 0.1}], lr=1e-2, betas=(0.9, 0.95),
                              eps=1e-9)
    assert not ours.defaults.get("fused") and ours.defaults["foreach"] is None
    x = torch.randn(7, 5)
    for _ in range(3):
        for model, opt in ((a, ours), (b, plain)):
            model(x).square().sum().backward()
            opt.step()
            opt.zero_grad()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_bench_and_training_build_the_same_optimizer():
    from cem_ablate.training.budget import Budget
    from cem_ablate.training.config import TrainConfig
    from cem_ablate.training.recipe import RecipeModule

    model = build_model({"size": "tiny", "vocab_size": 11})
    budget = Budget(steps=10, accumulation=1, effective_batch=2, tokens_per_sequence=8, tokens_per_step=16,
                    warmup_steps=1, requested_tokens=None, rule="max_steps")
    trained = RecipeModule(model, TrainConfig(), budget).configure_optimizers()["optimizer"]
    benched = make_optimizer(model)
    for key in ("fused", "foreach", "betas", "eps"):
        assert trained.defaults[key] == benched.defaults[key], key
    assert [g["weight_decay"] for g in trained.param_groups] == [g["weight_decay"] for g in benched.param_groups]
    assert parameters_device(model) == torch.device("cpu")
