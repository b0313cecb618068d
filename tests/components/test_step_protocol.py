"""The step protocol a joint-step block drives (docs/design/energy-lens.md#s11-3-energy-transformer-block): `step_context(c)`, then
`direction(u, ctx)` = eta Delta(u) and `step_energy(u, ctx)` at any query state u.

Every built-in sublayer must be its own forward when driven this way: at T = 1,
forward(h) = h + direction(c, step_context(c)) with c = norm(h); CEM sublayers at
T = 2 are x^1 + direction(RMSNorm(x^1), ctx) (docs/design/layers.md#s2-cem-attention), and their step energy is the
energy of docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp / docs/design/energy-lens.md#s11-3-energy-transformer-block.
"""

from __future__ import annotations

import pytest
import torch

import components.cem_attention_kernels as kernels
from cem_ablate.model.protocol import JointStep
from tests.components import reference_cem as ref
from tests.components import reference_momentum as refm
from tests.components.helpers import build_sublayer, random_stream

PRECOND = {"name": "diag_lowrank", "rank": 3}
SUBLAYERS = [  # (kind, sub-config): every built-in attention and MLP, the code paths that differ
    ("attention", {"name": "llama"}),
    ("mlp", {"name": "llama"}),
    ("attention", {"name": "cem", "kq_diag": "none", "preconditioner": "diag"}),
    ("attention", {"name": "cem", "kq_diag": "shared", "preconditioner": PRECOND, "step_size": 0.7}),
    (
        "attention",
        {"name": "cem", "kq_diag": "per_head", "diag_update": "exact", "preconditioner": PRECOND, "step_size": 0.7},
    ),
    (
        "attention",
        {"name": "cem", "kq_diag": "shared", "diag_update": "exact", "learnable_step_size": True, "impl": "reference"},
    ),
    ("attention", {"name": "cem", "kernel": "sdpa"}),
    ("mlp", {"name": "cem", "preconditioner": PRECOND, "step_size": 0.8}),
    ("mlp", {"name": "cem", "impl": "reference", "learnable_step_size": True}),
    ("mlp", {"name": "cem_param_matched", "preconditioner": "diag"}),
    ("mlp", {"name": "hopfield", "preconditioner": PRECOND, "step_size": 0.8}),
    ("mlp", {"name": "hopfield", "impl": "reference"}),
]
ENERGY = [case for case in SUBLAYERS if case[1]["name"] != "llama"]


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(kernels, "BLOCK_ROWS", 3)


def ids(case):
    kind, sub = case
    return f"{kind}-" + "-".join(str(v) if not isinstance(v, dict) else v["name"] for v in sub.values())


@pytest.mark.parametrize("kind,sub", SUBLAYERS, ids=[ids(c) for c in SUBLAYERS])
def test_one_step_forward_is_h_plus_direction_at_the_context(kind, sub):
    layer = build_sublayer(kind, sub)
    assert isinstance(layer, JointStep)
    h = random_stream().requires_grad_(True)
    c = layer.norm(h)
    driven = h + layer.direction(c, layer.step_context(c))
    out = layer(h)
    assert (out - driven).abs().max() <= 1e-12
    names = [n for n, p in layer.named_parameters() if p.requires_grad]
    params = [p for n, p in layer.named_parameters() if p.requires_grad]
    g_out = torch.autograd.grad(out.square().sum(), [h, *params])
    g_driven = torch.autograd.grad(driven.square().sum(), [h, *params])
    for name, a, b in zip(["input", *names], g_out, g_driven):
        assert (a - b).abs().max() <= 1e-10, name


@pytest.mark.parametrize("kind,sub", ENERGY, ids=[ids(c) for c in ENERGY])
def test_two_steps_are_driven_by_direction_and_step_energy_is_the_energy(kind, sub):
    layer = build_sublayer(kind, {**sub, "steps": 2})
    h = random_stream()
    c = layer.norm(h)
    ctx = layer.step_context(c)
    x1 = h + layer.direction(c, ctx)
    x2 = x1 + layer.direction(layer.norm(x1), ctx)
    assert (layer(h) - x2).abs().max() <= 1e-12
    u = layer.norm(x1)
    assert (layer.step_energy(u, ctx) - layer.energy(u, h)).abs().max() <= 1e-10
    if kind == "attention":
        expected = ref.attention_energy(layer, u, h)
    elif sub["name"] == "hopfield":
        expected = refm.hopfield_energy(layer, u)
    else:
        expected = torch.as_tensor(ref.mlp_energy(layer, u, h))
    assert layer.step_energy(u, ctx).shape == (h.shape[0],)
    assert (layer.step_energy(u, ctx) - expected).abs().max() <= 1e-9


@pytest.mark.parametrize(
    "kind,sub",
    [c for c in ENERGY if c[1].get("impl") != "reference"],
    ids=[ids(c) for c in ENERGY if c[1].get("impl") != "reference"],
)
def test_advance_is_gd_arithmetic_and_direction_matches_the_reference_path(kind, sub):
    """`advance` (the gd step) is x + direction up to rounding, and the fast path's
    direction equals the reference path's to 1e-12."""
    fast = build_sublayer(kind, sub)
    slow = build_sublayer(kind, {**sub, "impl": "reference"})
    slow.load_state_dict(fast.state_dict())
    h, u = random_stream(), random_stream(seed=5)
    c = fast.norm(h)
    ctx_fast, ctx_slow = fast.step_context(c), slow.step_context(c)
    assert (fast.advance(h, u, ctx_fast) - (h + fast.direction(u, ctx_fast))).abs().max() <= 1e-12
    assert (fast.direction(u, ctx_fast) - slow.direction(u, ctx_slow)).abs().max() <= 1e-12
