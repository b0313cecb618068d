import numpy as np
import pytest
import torch

from components.cem_mlp import silu_integral
from tests.components import reference_cem as ref
from tests.components.helpers import build_sublayer, random_stream

PRECONDS = ["identity", "diag", {"name": "diag_lowrank", "rank": 5}]


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("precond", PRECONDS, ids=str)
def test_matches_independent_reference(steps, precond):
    layer = build_sublayer("mlp", {"name": "cem", "steps": steps, "preconditioner": precond, "step_size": 0.8})
    h = random_stream()
    assert torch.allclose(layer(h), ref.mlp_forward(layer, h, steps, step_size=0.8), atol=1e-9, rtol=0)


def test_energy_matches_closed_form_reference():
    layer = build_sublayer("mlp", {"name": "cem"})
    h, x = random_stream(seed=1), random_stream(seed=2)
    assert layer.energy(x, h).shape == (2,)
    assert torch.allclose(layer.energy(x, h), ref.mlp_energy(layer, x, h), atol=1e-9, rtol=0)


def test_silu_integral_matches_dilogarithm_closed_form():
    z = np.linspace(-30, 30, 1201)
    ours = silu_integral(torch.from_numpy(z)).numpy()
    assert np.abs(ours - ref.silu_integral_closed_form(z)).max() < 1e-11


def test_one_step_is_gradient_descent():
    layer = build_sublayer("mlp", {"name": "cem"})
    h = random_stream()
    u = layer.norm(h).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(layer.energy(u, h).sum(), u)
    assert torch.allclose(layer(h), h - grad, atol=1e-10, rtol=0)


def test_t1_identity_is_tied_swiglu():
    """gate_proj = V, up_proj = W, down_proj = V^T (docs/design/layers.md#s3-cem-mlp)."""
    layer = build_sublayer("mlp", {"name": "cem"})
    h = random_stream()
    x = layer.norm(h)
    swiglu = h + (torch.nn.functional.silu(x @ layer.v.weight.T) * (x @ layer.w.weight.T)) @ layer.v.weight
    assert torch.allclose(layer(h), swiglu, atol=1e-12)


def test_param_matched_width():
    layer = build_sublayer("mlp", {"name": "cem_param_matched"}, d_mlp=40)
    assert layer.w.weight.shape == (60, 24) and layer.v.weight.shape == (60, 24)
    custom = build_sublayer("mlp", {"name": "cem", "width_multiplier": 2.0}, d_mlp=40)
    assert custom.v.out_features == 80


def test_learnable_step_size_gets_gradient():
    layer = build_sublayer("mlp", {"name": "cem", "steps": 2, "learnable_step_size": True})
    layer(random_stream()).sum().backward()
    assert isinstance(layer.step_size, torch.nn.Parameter) and layer.step_size.grad is not None
