"""The fast CEM paths compute the same function as the reference paths (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp).

Every attention variant (KQ diagonal x diagonal update x T x preconditioner) and every
MLP variant is run through `impl: fast` and `impl: reference` in float64 with all
parameters randomized; outputs and every gradient (parameters and input) must agree
to 1e-9. The blocked kernel is forced to use several query blocks (BLOCK_ROWS = 3 at
J = 7), so block boundaries, causal skipping and the diagonal blocks are exercised.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import components.cem_attention_kernels as kernels
from cem_ablate import build_model
from cem_ablate.config.errors import ConfigError
from tests.components.helpers import build_sublayer, random_stream

KQ = ["none", "shared", "per_head"]
UPDATES = ["paper", "exact"]
PRECONDS = ["identity", "diag", {"name": "diag_lowrank", "rank": 3}]
TOL = 1e-9


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(kernels, "BLOCK_ROWS", 3)


def pair(kind: str, sub: dict):
    """The same randomized sublayer twice: fast and reference implementations."""
    fast = build_sublayer(kind, {**sub, "impl": "fast"})
    ref = build_sublayer(kind, {**sub, "impl": "reference"})
    ref.load_state_dict(fast.state_dict())
    return fast, ref


def outputs_and_grads(layer, h):
    h = h.clone().requires_grad_(True)
    out = layer(h)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)  # a generic cotangent
    params = [p for _, p in sorted(layer.named_parameters())]
    grads = torch.autograd.grad((out * weights).sum(), [h, *params])
    names = ["input"] + [n for n, _ in sorted(layer.named_parameters())]
    return out, dict(zip(names, grads))


def assert_same_function(fast, ref, h):
    out_f, grads_f = outputs_and_grads(fast, h)
    out_r, grads_r = outputs_and_grads(ref, h)
    assert (out_f - out_r).abs().max() <= TOL
    assert grads_f.keys() == grads_r.keys()
    for name in grads_f:
        gap = (grads_f[name] - grads_r[name]).abs().max()
        assert gap <= TOL, f"gradient of {name} differs by {gap:.3g}"
        assert grads_r[name].abs().max() > 0 or name == "precond.u", f"{name} got no gradient"


ATTENTION_CASES = [  # diag_update only matters with a KQ diagonal
    case for case in itertools.product(KQ, UPDATES, [1, 2], PRECONDS) if case[0] != "none" or case[1] == "paper"
]


@pytest.mark.parametrize(
    "kq,update,steps,precond", ATTENTION_CASES, ids=lambda v: v["name"] if isinstance(v, dict) else str(v)
)
def test_attention_fast_equals_reference(kq, update, steps, precond):
    fast, ref = pair(
        "attention",
        {
            "name": "cem",
            "steps": steps,
            "kq_diag": kq,
            "diag_update": update,
            "preconditioner": precond,
            "step_size": 0.7,
        },
    )
    assert fast.resolved_kernel(torch.device("cpu")) == "blocked"
    assert_same_function(fast, ref, random_stream())


@pytest.mark.parametrize("kq", KQ)
def test_attention_learnable_step_size_and_checkpointing(kq):
    sub = {
        "name": "cem",
        "steps": 3,
        "kq_diag": kq,
        "learnable_step_size": True,
        "preconditioner": {"name": "diag_lowrank", "rank": 2},
    }
    fast, ref = pair("attention", {**sub, "checkpoint_steps": True})
    assert_same_function(fast, ref, random_stream())
    plain, _ = pair("attention", sub)
    plain.load_state_dict(fast.state_dict())
    assert_same_function(fast, plain, random_stream())


@pytest.mark.parametrize("steps", [1, 2])
def test_sdpa_kernel_equals_reference_and_uses_the_flash_kernel(steps):
    fast, ref = pair("attention", {"name": "cem", "steps": steps, "kernel": "sdpa", "preconditioner": "diag"})
    assert_same_function(fast, ref, random_stream())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fast(random_stream()).sum().backward()
    ops = {event.name for event in prof.events()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops
    assert "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in ops


def test_sdpa_kernel_rejects_a_kq_diagonal():
    with pytest.raises(ConfigError, match="kernel"):
        build_model({"size": "tiny", "attention": {"name": "cem", "kq_diag": "shared", "kernel": "sdpa"}})


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("kq", KQ)
def test_flex_score_mod_equals_reference_forward(kq):
    """FlexAttention has no CPU backward (NOTES.md); its forward checks the score_mod math."""
    fast, ref = pair("attention", {"name": "cem", "kq_diag": kq, "kernel": "flex"})
    h = random_stream()
    with torch.no_grad():
        fast.requires_grad_(False)
        assert (fast(h) - ref(h)).abs().max() <= TOL


def test_kernel_selection():
    assert kernels.select_kernel("cuda", flex_available=True) == "flex"
    assert kernels.select_kernel("cuda", wide_values=True, flex_available=True) == "blocked"
    assert kernels.select_kernel("cuda", flex_available=False) == "blocked"
    assert kernels.select_kernel("cpu", flex_available=True) == "blocked"
    assert kernels.select_kernel("cuda", flex_available=True, head_dim=8) == "blocked"  # flex needs >= 16
    assert kernels.select_kernel("cuda", flex_available=True, head_dim=16) == "flex"
    cuda = torch.device("cuda")
    if kernels.FLEX_AVAILABLE:
        wide_heads = build_sublayer("attention", {"name": "cem", "kq_diag": "shared"}, d_model=32, n_heads=2)
        assert wide_heads.resolved_kernel(cuda) == "flex"
        narrow_heads = build_sublayer("attention", {"name": "cem", "kq_diag": "shared"})  # head dim 8
        assert narrow_heads.resolved_kernel(cuda) == "blocked"
    exact = build_sublayer("attention", {"name": "cem", "kq_diag": "shared", "diag_update": "exact"})
    assert exact.resolved_kernel(cuda) == "blocked"
    layer = build_sublayer("attention", {"name": "cem", "kernel": "sdpa"})
    assert layer.resolved_kernel(cuda) == "sdpa"  # an explicit choice wins


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("precond", PRECONDS, ids=str)
def test_mlp_fast_equals_reference(steps, precond):
    fast, ref = pair("mlp", {"name": "cem", "steps": steps, "preconditioner": precond, "step_size": 0.8})
    assert_same_function(fast, ref, random_stream())


def test_mlp_checkpointing_and_learnable_step_size():
    sub = {"name": "cem_param_matched", "steps": 3, "learnable_step_size": True, "preconditioner": "diag"}
    fast, ref = pair("mlp", {**sub, "checkpoint_steps": True})
    assert_same_function(fast, ref, random_stream())


@pytest.mark.parametrize(
    "kind,sub",
    [
        ("attention", {"name": "cem", "kq_diag": "shared", "preconditioner": "diag"}),
        ("attention", {"name": "cem", "kq_diag": "per_head", "diag_update": "exact", "learnable_step_size": True}),
        ("mlp", {"name": "cem", "preconditioner": {"name": "diag_lowrank", "rank": 3}}),
    ],
    ids=["attention-shared", "attention-exact", "mlp"],
)
@pytest.mark.parametrize(
    "state,k,ckpt", [("normalized", None, False), ("normalized", 2, True), ("raw", 1, False), ("raw", 2, True)]
)
def test_recursion_options_fast_equals_reference(kind, sub, state, k, ckpt):
    """recursion_state and backprop_steps (docs/design/layers.md#s2-cem-attention) through the fast path, with checkpointing."""
    opts = {"steps": 3, "recursion_state": state, "checkpoint_steps": ckpt}
    if k is not None:
        opts["backprop_steps"] = k
    fast, ref = pair(kind, {**sub, **opts})
    assert_same_function(fast, ref, random_stream())


@pytest.mark.parametrize("update", ["heavy_ball", "nesterov"])
@pytest.mark.parametrize(
    "kind,sub",
    [
        ("attention", {"name": "cem", "kq_diag": "shared", "preconditioner": {"name": "diag_lowrank", "rank": 3}}),
        ("attention", {"name": "cem", "kq_diag": "per_head", "diag_update": "exact", "learnable_momentum": True}),
        ("mlp", {"name": "cem", "preconditioner": {"name": "diag_lowrank", "rank": 3}, "learnable_momentum": True}),
        ("mlp", {"name": "hopfield", "preconditioner": "diag", "learnable_step_size": True}),
    ],
    ids=["attention-shared", "attention-exact", "mlp", "hopfield"],
)
@pytest.mark.parametrize("k,ckpt", [(None, False), (2, True)])
def test_momentum_fast_equals_reference(kind, sub, update, k, ckpt):
    """docs/design/energy-lens.md#s11-1-momentum momentum through the fast path, with truncation and checkpointing."""
    opts = {"steps": 3, "update": update, "momentum": 0.6, "checkpoint_steps": ckpt, "step_size": 0.7}
    if k is not None:
        opts["backprop_steps"] = k
    fast, ref = pair(kind, {**sub, **opts})
    assert_same_function(fast, ref, random_stream())


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("precond", PRECONDS, ids=str)
def test_hopfield_fast_equals_reference(steps, precond):
    fast, ref = pair("mlp", {"name": "hopfield", "steps": steps, "preconditioner": precond, "step_size": 0.8})
    assert_same_function(fast, ref, random_stream())


def test_checkpointing_keeps_the_energy_trace():
    layer = build_sublayer("attention", {"name": "cem", "steps": 3, "step_size": 0.05, "checkpoint_steps": True})
    layer.track_energy = True
    layer(random_stream()).sum().backward()
    assert len(layer.energy_trace) == 4
    assert all(b < a for a, b in zip(layer.energy_trace, layer.energy_trace[1:]))


@pytest.mark.parametrize(
    "kind,sub",
    [
        ("attention", {"name": "cem", "steps": 2, "kq_diag": "shared", "preconditioner": "diag_lowrank"}),
        ("attention", {"name": "cem", "kq_diag": "per_head", "diag_update": "exact"}),
        ("mlp", {"name": "cem", "steps": 2, "preconditioner": "diag_lowrank"}),
        (
            "attention",
            {"name": "cem", "steps": 3, "kq_diag": "shared", "update": "nesterov", "learnable_momentum": True},
        ),
        ("mlp", {"name": "hopfield", "steps": 3, "update": "heavy_ball", "preconditioner": "diag_lowrank"}),
    ],
)
def test_bf16_autocast_stays_close_to_float32(kind, sub):
    """Mixed precision: the fast kernels keep scores and probabilities in float32."""
    fast = build_sublayer(kind, sub).float()
    h = random_stream().float()
    expected = build_sublayer(kind, {**sub, "impl": "reference"}).float()(h)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fast(h)
    out.float().sum().backward()
    rel = (out.float() - expected).norm() / (expected - h).norm()
    assert rel < 0.05
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in fast.parameters())
