"""training/optimizer.py: AdamW and clipping as training and the bench run them (docs/design/experiments.md#s7-training-recipe)."""

from __future__ import annotations

import torch

from cem_ablate import build_model
from cem_ablate.bench.train_step import make_optimizer
from cem_ablate.training.optimizer import build_adamw, clip_gradients, parameters_device


def test_cpu_adamw_is_bit_identical_to_a_plain_adamw():
    torch.manual_seed(0)
    a = torch.nn.Linear(5, 3)
    b = torch.nn.Linear(5, 3)
    b.load_state_dict(a.state_dict())
    ours = build_adamw(
        [{"params": list(a.parameters()), "weight_decay": 0.1}], lr=1e-2, betas=(0.9, 0.95), eps=1e-9, kernel="single"
    )
    plain = torch.optim.AdamW(
        [{"params": list(b.parameters()), "weight_decay": 0.1}], lr=1e-2, betas=(0.9, 0.95), eps=1e-9
    )
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
    budget = Budget(
        steps=10,
        accumulation=1,
        effective_batch=2,
        tokens_per_sequence=8,
        tokens_per_step=16,
        warmup_steps=1,
        requested_tokens=None,
        rule="max_steps",
    )
    trained = RecipeModule(model, TrainConfig(), budget).configure_optimizers()["optimizer"]
    benched = make_optimizer(model)
    for key in ("fused", "foreach", "betas", "eps"):
        assert trained.defaults[key] == benched.defaults[key], key
    assert [g["weight_decay"] for g in trained.param_groups] == [g["weight_decay"] for g in benched.param_groups]
    assert parameters_device(model) == torch.device("cpu")


def test_mup_multipliers_survive_decay_preconditioner_and_the_schedule():
    """Under mup each class keeps its lr multiplier through `decay_preconditioner` (its weight
    decay decoupled) and through the warmup-cosine LambdaLR, which scales every group's own lr."""
    from cem_ablate.training.recipe import decay_preconditioners, preconditioner_parameters

    torch.manual_seed(0)
    model = build_model(
        {
            "d_model": 128,
            "n_layers": 1,
            "n_heads": 4,
            "d_mlp": 344,
            "vocab_size": 64,
            "parametrization": "mup",
            "base_d_model": 32,
            "attention": {"name": "cem", "preconditioner": {"name": "diag_lowrank"}},
        }
    )
    groups = decay_preconditioners(model.parameter_groups(0.1), model, 0.1)
    moved = {id(p) for p in preconditioner_parameters(model)}
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    for g in groups:
        if any(id(p) in moved for p in g["params"]):
            assert all(id(p) in moved for p in g["params"])
            assert g["weight_decay"] * g["lr_multiplier"] == 0.1  # decayed, at the base's lr x wd
    optimizer = build_adamw(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, kernel="single")
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    for g in optimizer.param_groups:
        assert g["lr"] == 0.5 * 1e-3 * g["lr_multiplier"]
    assert {g["param_class"]: g["lr_multiplier"] for g in optimizer.param_groups}["hidden"] == 0.25
    del schedule


def test_clipping_is_lightnings_norm_clip_bit_for_bit():
    """The module's clip (training.recipe) replaced Trainer(gradient_clip_val): the same
    parameters in the same order through the same torch call, so CPU results stand."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    optimizer = build_adamw(
        [{"params": list(model.parameters()), "weight_decay": 0.1}],
        lr=1e-2,
        betas=(0.9, 0.95),
        eps=1e-9,
        kernel="single",
    )
    model(torch.randn(4, 6)).square().sum().mul(100).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    clip_gradients(optimizer, 1.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert total > 1.0  # the clip did something
    expected = [g * torch.clamp(1.0 / (total + 1e-6), max=1.0) for g in grads]  # clip_grad_norm_'s rule
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), expected))
    assert torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])) <= 1.0 + 1e-6
    before = [p.grad.clone() for p in model.parameters()]
    clip_gradients(optimizer, 0.0)  # 0 disables clipping
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), before))
