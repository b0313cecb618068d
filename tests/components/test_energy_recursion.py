"""The recursion options both CEM sublayers share (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp).

`recursion_state: normalized` (x^0 = c, u^0 = c, output h + (x^T - x^0)) and
`backprop_steps: k` (the first T - k updates under no_grad, added as a constant)
against the independent float64 reference, outputs and every gradient to 1e-9.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from cem_ablate import build_model
from cem_ablate.config.errors import ConfigError
from tests.components import reference_cem as ref
from tests.components.helpers import build_sublayer, random_stream

TOL = 1e-9
STATES = ["raw", "normalized"]


def attention(steps, state="raw", k=None, kq="shared", update="paper", impl="reference"):
    sub = {
        "name": "cem",
        "steps": steps,
        "kq_diag": kq,
        "diag_update": update,
        "recursion_state": state,
        "preconditioner": {"name": "diag_lowrank", "rank": 3},
        "step_size": 0.7,
        "impl": impl,
    }
    if k is not None:
        sub["backprop_steps"] = k
    return build_sublayer("attention", sub)


def mlp(steps, state="raw", k=None, impl="reference"):
    sub = {
        "name": "cem",
        "steps": steps,
        "recursion_state": state,
        "preconditioner": {"name": "diag_lowrank", "rank": 5},
        "step_size": 0.8,
        "impl": impl,
    }
    if k is not None:
        sub["backprop_steps"] = k
    return build_sublayer("mlp", sub)


def reference(layer, h):
    if hasattr(layer, "n_heads"):
        return ref.attention_forward(
            layer, h, layer.steps, layer.diag_update, 0.7, layer.recursion_state, layer.backprop_steps
        )
    return ref.mlp_forward(layer, h, layer.steps, 0.8, layer.recursion_state, layer.backprop_steps)


def output_and_grads(fn, layer, h):
    h = h.clone().requires_grad_(True)
    out = fn(h)
    cotangent = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    params = [p for _, p in sorted(layer.named_parameters())]
    return out, torch.autograd.grad((out * cotangent).sum(), [h, *params])


def assert_matches_reference(layer, h):
    out, grads = output_and_grads(layer, layer, h)
    out_ref, grads_ref = output_and_grads(lambda x: reference(layer, x), layer, h)
    assert (out - out_ref).abs().max() <= TOL
    for g, g_ref in zip(grads, grads_ref):
        assert (g - g_ref).abs().max() <= TOL


# -- recursion_state: normalized --------------------------------------------------------
@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize(
    "kq,update,steps", [("none", "paper", 2), ("shared", "paper", 3), ("per_head", "exact", 2), ("shared", "exact", 1)]
)
def test_normalized_attention_matches_reference(kq, update, steps, impl):
    assert_matches_reference(attention(steps, "normalized", kq=kq, update=update, impl=impl), random_stream())


@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize("steps", [1, 3])
def test_normalized_mlp_matches_reference(steps, impl):
    assert_matches_reference(mlp(steps, "normalized", impl=impl), random_stream())


@pytest.mark.parametrize("build", [attention, mlp], ids=["attention", "mlp"])
def test_one_step_is_identical_under_both_states(build):
    h = random_stream()
    raw, normalized = build(1, "raw"), build(1, "normalized")
    assert (raw(h) - normalized(h)).abs().max() <= 1e-12
    assert (build(2, "raw")(h) - build(2, "normalized")(h)).abs().max() > 1e-3  # T = 2 differs


def _descent(layer, u, h):
    """u - grad E(u | norm(h)) by autograd on the layer's energy."""
    u = u.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(layer.energy(u, h).sum(), u)
    return u - grad


@pytest.mark.parametrize("kind", ["attention", "mlp"])
def test_normalized_steps_are_gradient_descent_at_the_normalized_state(kind):
    """x^1 = c - grad E(c), x^2 = x^1 - grad E(RMSNorm(x^1)) moved from x^1; output h + x^2 - c."""
    sub = {"name": "cem", "steps": 2, "recursion_state": "normalized"}
    if kind == "attention":
        sub["kq_diag"] = "none"
    layer = build_sublayer(kind, sub)
    h = random_stream()
    c = layer.norm(h)
    x1 = _descent(layer, c, h)
    u1 = layer.norm(x1)
    x2 = x1 + (_descent(layer, u1, h) - u1)
    assert (layer(h) - (h + x2 - c)).abs().max() <= 1e-10


# -- backprop_steps ---------------------------------------------------------------------
@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize("state,k", list(itertools.product(STATES, [1, 2])))
def test_truncated_attention_gradients_match_no_grad_reference(state, k, impl):
    assert_matches_reference(attention(3, state, k, kq="per_head", update="exact", impl=impl), random_stream())


@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize("state,k", list(itertools.product(STATES, [1, 2])))
def test_truncated_mlp_gradients_match_no_grad_reference(state, k, impl):
    assert_matches_reference(mlp(3, state, k, impl=impl), random_stream())


@pytest.mark.parametrize("build", [attention, mlp], ids=["attention", "mlp"])
def test_truncation_keeps_the_forward_and_changes_the_gradient(build):
    h = random_stream()
    full, truncated = build(3), build(3, k=1)
    out_full, grads_full = output_and_grads(full, full, h)
    out_trunc, grads_trunc = output_and_grads(truncated, truncated, h)
    assert (out_full - out_trunc).abs().max() <= 1e-12
    assert max((a - b).abs().max() for a, b in zip(grads_full, grads_trunc)) > 1e-3
    assert all(g.abs().max() > 0 for g in grads_trunc)  # input, context and keys keep gradients


def test_backprop_steps_equal_to_steps_is_the_default():
    h = random_stream()
    default, explicit = attention(2), attention(2, k=2)
    for a, b in zip(output_and_grads(default, default, h)[1], output_and_grads(explicit, explicit, h)[1]):
        assert (a - b).abs().max() == 0


def test_truncation_with_checkpointing_and_under_no_grad():
    h = random_stream()
    plain = build_sublayer("mlp", {"name": "cem", "steps": 3, "backprop_steps": 1})
    ckpt = build_sublayer("mlp", {"name": "cem", "steps": 3, "backprop_steps": 1, "checkpoint_steps": True})
    for a, b in zip(output_and_grads(plain, plain, h)[1], output_and_grads(ckpt, ckpt, h)[1]):
        assert (a - b).abs().max() <= TOL
    with torch.no_grad():
        assert (plain(h) - build_sublayer("mlp", {"name": "cem", "steps": 3})(h)).abs().max() <= 1e-12


def test_energy_trace_under_truncation_and_normalized_state():
    layer = build_sublayer(
        "attention",
        {"name": "cem", "steps": 3, "step_size": 0.05, "backprop_steps": 1, "recursion_state": "normalized"},
    )
    layer.track_energy = True
    layer(random_stream()).sum().backward()
    assert len(layer.energy_trace) == 4
    assert all(b < a for a, b in zip(layer.energy_trace, layer.energy_trace[1:]))


# -- validation -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["attention", "mlp"])
@pytest.mark.parametrize(
    "sub,match",
    [
        ({"steps": 2, "backprop_steps": 0}, r"model\.{kind}\.backprop_steps: must be at least 1"),
        (
            {"steps": 2, "backprop_steps": 3},
            r"model\.{kind}\.backprop_steps: must be at most the recursion steps T = 2",
        ),
        ({"steps": 2, "depth_mode": "reuse", "backprop_steps": 2}, r"model\.{kind}\.backprop_steps: .* T = 1"),
        (
            {"recursion_state": "norm"},
            r"model\.{kind}\.recursion_state: unknown value 'norm'\. Did you mean 'normalized'",
        ),
    ],
)
def test_bad_values_are_one_error_naming_the_key(kind, sub, match):
    with pytest.raises(ConfigError, match=match.format(kind=kind)):
        build_model({"size": "tiny", kind: {"name": "cem", **sub}})
