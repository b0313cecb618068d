"""Optimizer parameter groups of the training recipe (docs/design/experiments.md#s7-training-recipe)."""

from __future__ import annotations

import pytest

from cem_ablate import build_model
from cem_ablate.config import parse
from cem_ablate.config.errors import ConfigError
from cem_ablate.training.budget import Budget
from cem_ablate.training.config import TrainConfig
from cem_ablate.training.recipe import RecipeModule

MODEL = {
    "size": "tiny",
    "vocab_size": 11,
    "attention": {"name": "cem", "kq_diag": "shared", "preconditioner": {"name": "diag_lowrank", "rank": 2}},
    "mlp": {"name": "cem", "preconditioner": "diag"},
}
BUDGET = Budget(
    steps=10,
    accumulation=1,
    effective_batch=2,
    tokens_per_sequence=8,
    tokens_per_step=16,
    warmup_steps=1,
    requested_tokens=None,
    rule="max_steps",
)


def decay_by_name(decay_preconditioner: bool) -> dict[str, float]:
    model = build_model(MODEL)
    train = parse(TrainConfig, {"weight_decay": 0.1, "decay_preconditioner": decay_preconditioner}, "train")
    optimizer = RecipeModule(model, train, BUDGET).configure_optimizers()["optimizer"]
    decay = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    names = dict(model.named_parameters())
    assert len(decay) == len(names)  # every parameter in exactly one group
    return {n: decay[id(p)] for n, p in names.items()}


@pytest.mark.parametrize("flag", [False, True])
def test_preconditioner_decay_follows_the_flag(flag):
    decay = decay_by_name(flag)
    precond = [n for n in decay if ".precond." in n]
    assert {n.rsplit(".", 1)[1] for n in precond} == {"p", "u", "v"}
    assert all(decay[n] == (0.1 if flag else 0.0) for n in precond)
    # everything else keeps docs/design/experiments.md#s7-training-recipe's groups either way
    assert decay["blocks.0.attention.w_q.weight"] == 0.1
    assert decay["blocks.0.attention.kq_diag"] == 0.0
    assert decay["blocks.0.attention.norm.weight"] == 0.0


def test_default_is_spec_decision():
    assert TrainConfig().decay_preconditioner is False
    with pytest.raises(ConfigError, match="train.decay_preconditioner"):
        parse(TrainConfig, {"decay_preconditioner": "yes"}, "train")
