import itertools

import pytest
import torch

from cem_ablate.model.blocks import RMSNorm
from tests.components import reference_cem as ref
from tests.components.helpers import build_sublayer, random_stream

KQ = ["none", "shared", "per_head"]
UPDATES = ["paper", "exact"]
PRECONDS = ["identity", "diag", {"name": "diag_lowrank", "rank": 3}]


@pytest.mark.parametrize("kq,update,steps", list(itertools.product(KQ, UPDATES, [1, 2])))
def test_matches_independent_reference(kq, update, steps):
    layer = build_sublayer(
        "attention",
        {
            "name": "cem",
            "steps": steps,
            "kq_diag": kq,
            "diag_update": update,
            "preconditioner": {"name": "diag_lowrank", "rank": 3},
        },
    )
    h = random_stream()
    expected = ref.attention_forward(layer, h, steps, diag_update=update)
    assert torch.allclose(layer(h), expected, atol=1e-9, rtol=0)


@pytest.mark.parametrize("precond", PRECONDS)
def test_preconditioners_match_reference(precond):
    layer = build_sublayer(
        "attention", {"name": "cem", "steps": 2, "kq_diag": "shared", "preconditioner": precond, "step_size": 0.7}
    )
    h = random_stream()
    expected = ref.attention_forward(layer, h, 2, step_size=0.7)
    assert torch.allclose(layer(h), expected, atol=1e-9, rtol=0)


@pytest.mark.parametrize("kq", KQ)
def test_energy_matches_reference(kq):
    layer = build_sublayer("attention", {"name": "cem", "kq_diag": kq})
    h, x = random_stream(seed=1), random_stream(seed=2)
    assert layer.energy(x, h).shape == (2,)
    assert torch.allclose(layer.energy(x, h), ref.attention_energy(layer, x, h), atol=1e-9, rtol=0)


def _grad_step(layer, h):
    """h - grad_u E(u | norm(h)) at u = RMSNorm(h): one descent step by autograd."""
    u = layer.norm(h).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(layer.energy(u, h).sum(), u)
    return h - grad


def test_one_step_is_gradient_descent_without_diagonal():
    layer = build_sublayer("attention", {"name": "cem", "kq_diag": "none"})
    h = random_stream()
    assert torch.allclose(layer(h), _grad_step(layer, h), atol=1e-10, rtol=0)


@pytest.mark.parametrize("kq", ["shared", "per_head"])
def test_exact_diag_update_is_gradient_descent(kq):
    layer = build_sublayer("attention", {"name": "cem", "kq_diag": kq, "diag_update": "exact"})
    h = random_stream()
    assert torch.allclose(layer(h), _grad_step(layer, h), atol=1e-10, rtol=0)


def test_paper_diag_update_leaves_out_the_diagonal_gradient():
    layer = build_sublayer("attention", {"name": "cem", "kq_diag": "shared", "diag_update": "paper"})
    h = random_stream()
    gap = (layer(h) - _grad_step(layer, h)).abs().max()
    assert gap > 1e-3  # Algorithm 1 is not the exact gradient when delta != 0


ATTENTION_VARIANTS = [
    {"name": "llama"},
    {"name": "llama", "steps": 2, "depth_mode": "reuse"},
    *[
        {"name": "cem", "kq_diag": kq, "diag_update": up, "steps": t}
        for kq, up, t in itertools.product(KQ, UPDATES, [1, 2])
    ],
    {"name": "cem", "steps": 2, "depth_mode": "reuse", "preconditioner": "diag"},
]


@pytest.mark.parametrize("sub", ATTENTION_VARIANTS, ids=str)
def test_causality(sub):
    from cem_ablate import build_model

    torch.manual_seed(0)
    model = build_model(
        {"d_model": 24, "n_layers": 2, "n_heads": 3, "d_mlp": 40, "vocab_size": 11, "attention": sub}
    ).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "kq_diag" in name or "self_bias" in name:
                p.normal_(0, 0.3)
    h = random_stream(seq=6).requires_grad_(True)
    out = model.blocks[0](h)
    for i in range(6):
        (grad,) = torch.autograd.grad(out[:, i].sum(), h, retain_graph=True)
        assert grad[:, i + 1 :].abs().max() == 0 if i < 5 else True
        assert grad[:, : i + 1].abs().max() > 0


def test_energy_trace_descends_with_small_step():
    layer = build_sublayer("attention", {"name": "cem", "steps": 3, "step_size": 0.05})
    layer.track_energy = True
    layer(random_stream())
    trace = layer.energy_trace
    assert len(trace) == 4
    assert all(b < a for a, b in zip(trace, trace[1:]))


def test_norm_module_is_shared_by_context_and_queries():
    layer = build_sublayer("attention", {"name": "cem"})
    assert isinstance(layer.norm, RMSNorm)
    assert sum(isinstance(m, RMSNorm) for m in layer.modules()) == 1


@pytest.mark.parametrize("kq,shape", [("none", None), ("shared", (24,)), ("per_head", (3, 24))])
def test_spec_parameter_names_and_shapes(kq, shape):
    layer = build_sublayer(
        "attention", {"name": "cem", "kq_diag": kq, "preconditioner": {"name": "diag_lowrank", "rank": 2}}
    )
    params = {n: tuple(p.shape) for n, p in layer.named_parameters()}
    assert params["w_q.weight"] == params["w_k.weight"] == (24, 24)
    assert params["self_bias"] == (3,)
    assert params["norm.weight"] == (24,)
    assert (params["precond.p"], params["precond.u"], params["precond.v"]) == ((3, 24), (3, 24, 2), (3, 24, 2))
    assert params.get("kq_diag") == shape
    assert hasattr(layer, "kq_diag") == (shape is not None)
