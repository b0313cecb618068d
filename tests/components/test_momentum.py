"""Momentum over the recursion steps (docs/design/energy-lens.md#s11-1-momentum) and the Hopfield MLP (docs/design/energy-lens.md#s11-3-energy-transformer-block).

Every sublayer with momentum is checked against the independent float64 reference of
`reference_momentum` (plain loops, dense preconditioners), outputs and the gradients of
the input and every parameter to 1e-9, with all parameters randomized (preconditioner
U, V, p, KQ diagonal, self bias, momentum logit). gd, mu = 0 and T = 1 must be gd's
code path exactly: compared with torch.equal.
"""

from __future__ import annotations

import math

import pytest
import torch

import components.cem_attention_kernels as kernels
from cem_ablate import build_model
from cem_ablate.config.errors import ConfigError
from tests.components import reference_cem as ref
from tests.components import reference_momentum as refm
from tests.components.helpers import build_sublayer, random_stream

TOL = 1e-9
PRECONDS = ["identity", "diag", {"name": "diag_lowrank", "rank": 3}]
KQ_CASES = [("none", "paper"), ("shared", "paper"), ("shared", "exact"), ("per_head", "exact")]
MOMENTUM_UPDATES = ["heavy_ball", "nesterov"]
ATT_STEP, MLP_STEP, MU = 0.7, 0.8, 0.6
PRODUCTION_BLOCK_ROWS = kernels.BLOCK_ROWS  # before the fixture below shrinks it


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(kernels, "BLOCK_ROWS", 3)  # several query blocks at J = 7


def attention(update="heavy_ball", steps=3, kq="shared", diag_update="paper", precond=PRECONDS[2], **extra):
    return build_sublayer(
        "attention",
        {
            "name": "cem",
            "steps": steps,
            "kq_diag": kq,
            "diag_update": diag_update,
            "preconditioner": precond,
            "step_size": ATT_STEP,
            "update": update,
            "momentum": MU,
            **extra,
        },
    )


def mlp(name="cem", update="heavy_ball", steps=3, precond=PRECONDS[2], **extra):
    return build_sublayer(
        "mlp",
        {
            "name": name,
            "steps": steps,
            "preconditioner": precond,
            "step_size": MLP_STEP,
            "update": update,
            "momentum": MU,
            **extra,
        },
    )


def reference(layer, h, query_states=None):
    """The reference output of a built sublayer, with the options it was built with."""
    mu = refm.momentum_of(layer)
    mu = MU if mu is None else mu
    eta = layer.step_size  # a float, or the learnable parameter
    if hasattr(layer, "n_heads"):
        update = ref.attention_update(layer, h, layer.diag_update, eta)
    elif hasattr(layer, "xi"):
        update = refm.hopfield_update(layer, eta)
    else:
        update = ref.mlp_update(layer, h, eta)
    return refm.momentum_recursion(
        h,
        layer.norm.weight,
        layer.steps,
        update,
        layer.update,
        mu,
        layer.recursion_state,
        layer.backprop_steps,
        query_states,
    )


def output_and_grads(fn, layer, h):
    h = h.clone().requires_grad_(True)
    out = fn(h)
    cotangent = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    names = ["input"] + [n for n, _ in sorted(layer.named_parameters())]
    params = [p for _, p in sorted(layer.named_parameters())]
    return out, dict(zip(names, torch.autograd.grad((out * cotangent).sum(), [h, *params], allow_unused=True)))


def assert_matches_reference(layer, h=None):
    h = random_stream() if h is None else h
    out, grads = output_and_grads(layer, layer, h)
    out_ref, grads_ref = output_and_grads(lambda x: reference(layer, x), layer, h)
    assert (out - out_ref).abs().max() <= TOL
    for name in grads:
        gap = (grads[name] - grads_ref[name]).abs().max()
        assert gap <= TOL, f"gradient of {name} differs by {gap:.3g}"
        assert grads_ref[name].abs().max() > 0 or name == "precond.u", f"{name} got no gradient"


def assert_identical(a, b, h=None):
    """Outputs and every gradient bit for bit (torch.equal)."""
    h = random_stream() if h is None else h
    b.load_state_dict(a.state_dict(), strict=False)
    out_a, grads_a = output_and_grads(a, a, h)
    out_b, grads_b = output_and_grads(b, b, h)
    assert torch.equal(out_a, out_b)
    for name in grads_a:
        assert torch.equal(grads_a[name], grads_b[name]), name


# -- against the independent reference ---------------------------------------------------
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("update", MOMENTUM_UPDATES)
@pytest.mark.parametrize("precond", PRECONDS, ids=str)
@pytest.mark.parametrize("kq,diag_update", KQ_CASES)
def test_attention_momentum_matches_reference(kq, diag_update, precond, update, impl):
    assert_matches_reference(attention(update, 3, kq, diag_update, precond, impl=impl))


@pytest.mark.parametrize("update", ["gd", *MOMENTUM_UPDATES])
@pytest.mark.parametrize("kq,diag_update", KQ_CASES)
def test_attention_one_step_matches_reference(kq, diag_update, update):
    assert_matches_reference(attention(update, 1, kq, diag_update))


@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("update", ["gd", *MOMENTUM_UPDATES])
@pytest.mark.parametrize("precond", PRECONDS, ids=str)
@pytest.mark.parametrize("name", ["cem", "cem_param_matched", "hopfield"])
def test_mlp_momentum_matches_reference(name, precond, update, impl):
    assert_matches_reference(mlp(name, update, 3, precond, impl=impl))
    assert_matches_reference(mlp(name, update, 1, precond, impl=impl))


@pytest.mark.parametrize("update", MOMENTUM_UPDATES)
@pytest.mark.parametrize(
    "build,extra",
    [
        (attention, {"kq": "per_head", "diag_update": "exact"}),
        (mlp, {}),
        (mlp, {"name": "hopfield"}),
    ],
    ids=["attention", "mlp", "hopfield"],
)
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize(
    "options",
    [
        {"learnable_momentum": True},
        {"learnable_momentum": True, "learnable_step_size": True, "recursion_state": "normalized"},
        {"backprop_steps": 1},
        {"backprop_steps": 2, "learnable_momentum": True, "recursion_state": "normalized"},
        {"backprop_steps": 2, "checkpoint_steps": True},
        {"checkpoint_steps": True, "learnable_momentum": True},
    ],
    ids=["learnable", "learnable-normalized", "k1", "k2-learnable-normalized", "k2-checkpoint", "checkpoint"],
)
def test_recursion_options_with_momentum_match_reference(build, extra, update, impl, options):
    """learnable mu, recursion_state, backprop_steps (frozen x and v) and checkpointing."""
    assert_matches_reference(build(update=update, steps=4, impl=impl, **extra, **options))


@pytest.mark.parametrize("update", MOMENTUM_UPDATES)
def test_momentum_changes_the_output_and_the_two_updates_differ(update):
    h = random_stream()
    gd, moved = attention("gd"), attention(update)
    moved.load_state_dict(gd.state_dict())
    assert (gd(h) - moved(h)).abs().max() > 1e-3
    hb, nesterov = mlp(update="heavy_ball"), mlp(update="nesterov")
    assert (hb(h) - nesterov(h)).abs().max() > 1e-3


# -- gd, mu = 0 and T = 1 are gd bit for bit ------------------------------------------------
@pytest.mark.parametrize("update", MOMENTUM_UPDATES)
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize(
    "build,extra",
    [
        (attention, {"kq": "per_head", "diag_update": "exact"}),
        (attention, {"kq": "none"}),
        (mlp, {}),
        (mlp, {"name": "hopfield"}),
    ],
    ids=["attention-exact", "attention", "mlp", "hopfield"],
)
def test_zero_momentum_and_one_step_are_gd_bit_for_bit(build, extra, impl, update):
    for steps, momentum, options in [
        (3, 0.0, {}),
        (1, MU, {}),
        (3, 0.0, {"backprop_steps": 1}),
        (1, MU, {"checkpoint_steps": True}),
    ]:
        gd = build(update="gd", steps=steps, impl=impl, **extra, **options)
        other = build(update=update, steps=steps, impl=impl, momentum=momentum, **extra, **options)
        assert_identical(gd, other)


def test_gd_ignores_momentum():
    assert_identical(attention("gd"), attention("gd", momentum=0.9))


# -- the Hopfield MLP ---------------------------------------------------------------------
def test_hopfield_update_is_minus_the_energy_gradient_for_identity_preconditioner():
    layer = build_sublayer("mlp", {"name": "hopfield"})
    u = random_stream(seed=3).requires_grad_(True)
    (grad,) = torch.autograd.grad(refm.hopfield_energy(layer, u).sum(), u)
    ctx = layer.step_context(layer.norm(random_stream()))
    assert (layer.direction(u, ctx) + grad).abs().max() <= 1e-12
    assert (layer.step_energy(u, ctx) - refm.hopfield_energy(layer, u)).abs().max() <= 1e-12
    assert (layer.energy(u, random_stream()) - refm.hopfield_energy(layer, u)).abs().max() <= 1e-12


def test_hopfield_one_step_is_a_tied_relu_mlp():
    layer = build_sublayer("mlp", {"name": "hopfield"})
    h = random_stream()
    assert (layer(h) - refm.relu_mlp(h, layer.norm.weight, layer.xi.weight)).abs().max() <= 1e-12


def test_hopfield_parameters_and_width():
    model = build_model(
        {
            "d_model": 16,
            "n_layers": 1,
            "n_heads": 2,
            "d_mlp": 40,
            "vocab_size": 11,
            "mlp": {"name": "hopfield", "width_multiplier": 1.5},
        }
    )
    layer = model.blocks[0].mlp
    assert dict((n, tuple(p.shape)) for n, p in layer.named_parameters()) == {
        "norm.weight": (16,),
        "xi.weight": (60, 16),
    }
    assert isinstance(layer.xi, torch.nn.Linear) and layer.xi.bias is None
    assert layer.supports_recursion
    assert layer.flops_per_token(32) == 2 * 16 * 60 + 2 * 60 * 16 + 60  # Xi u, ReLU, read-out; nothing once


def test_hopfield_energy_trace_descends():
    layer = build_sublayer("mlp", {"name": "hopfield", "steps": 3, "step_size": 0.05})
    layer.track_energy = True
    layer(random_stream())
    assert len(layer.energy_trace) == 4
    assert all(b < a for a, b in zip(layer.energy_trace, layer.energy_trace[1:]))


# -- learnable momentum ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["attention", "mlp"])
def test_learnable_momentum_is_one_undecayed_scalar_initialized_at_logit_mu(kind):
    sub = {
        "name": "cem" if kind == "attention" else "hopfield",
        "steps": 2,
        "update": "nesterov",
        "momentum": 0.3,
        "learnable_momentum": True,
    }
    model = build_model({"size": "tiny", kind: sub})
    layer = getattr(model.blocks[0], kind)
    assert layer.momentum_logit.shape == ()
    assert layer.momentum_logit.item() == pytest.approx(math.log(0.3 / 0.7), abs=1e-7)
    assert layer.momentum().item() == pytest.approx(0.3, abs=1e-7)
    decay, no_decay = model.parameter_groups(0.1)
    assert any(p is layer.momentum_logit for p in no_decay["params"])
    assert not any(p is layer.momentum_logit for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0
    ids = torch.randint(0, model.dims.vocab_size, (2, 9))
    model(ids).square().mean().backward()
    assert layer.momentum_logit.grad is not None and layer.momentum_logit.grad.abs() > 0


def test_fixed_momentum_adds_no_parameter():
    gd, hb = attention("gd"), attention("heavy_ball")
    assert [n for n, _ in gd.named_parameters()] == [n for n, _ in hb.named_parameters()]


# -- energy trace, FLOPs -------------------------------------------------------------------
@pytest.mark.parametrize("update", MOMENTUM_UPDATES)
@pytest.mark.parametrize("k", [None, 2])
def test_energy_trace_is_recorded_at_each_query_state(update, k):
    layer = attention(update, 4, backprop_steps=k) if k else attention(update, 4)
    layer.track_energy = True
    h = random_stream()
    layer(h).sum().backward()
    states: list[torch.Tensor] = []
    with torch.no_grad():
        x_final = reference(layer, h, states)
        expected = [float(ref.attention_energy(layer, u, h).mean()) for u in states]
        expected.append(float(ref.attention_energy(layer, layer.norm(x_final), h).mean()))  # the state reached
    assert len(layer.energy_trace) == 5
    assert layer.energy_trace == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    "build", [attention, mlp, lambda **kw: mlp("hopfield", **kw)], ids=["attention", "mlp", "hopfield"]
)
def test_flops_count_the_velocity_update(build):
    seq, d = 64, 24
    gd = build(update="gd", steps=3)
    hb, nesterov = build(update="heavy_ball", steps=3), build(update="nesterov", steps=3)
    assert gd.flops_per_step(seq) == gd.direction_flops(seq)
    assert hb.flops_per_step(seq) == gd.flops_per_step(seq) + 2 * d
    assert nesterov.flops_per_step(seq) == gd.flops_per_step(seq) + 3 * d
    assert hb.flops_per_token(seq) == gd.flops_per_token(seq) + 3 * 2 * d
    truncated = build(update="heavy_ball", steps=3, backprop_steps=1)
    assert truncated.backward_flops_per_token(seq) == 2 * (hb.flops_once(seq) + hb.flops_per_step(seq))
    one_step = build(update="nesterov", steps=1)  # T = 1 runs gd: nothing to add
    assert one_step.flops_per_token(seq) == build(update="gd", steps=1).flops_per_token(seq)


# -- validation -------------------------------------------------------------------------
@pytest.mark.parametrize("kind,name", [("attention", "cem"), ("mlp", "cem"), ("mlp", "hopfield")])
@pytest.mark.parametrize(
    "sub,match",
    [
        ({"update": "nesterow"}, r"model\.{kind}\.update: unknown value 'nesterow'\. Did you mean 'nesterov'"),
        ({"update": "heavy_ball", "momentum": 1.0}, r"model\.{kind}\.momentum: must be in \[0, 1\), got 1\.0"),
        ({"update": "heavy_ball", "momentum": -0.1}, r"model\.{kind}\.momentum: must be in \[0, 1\)"),
        ({"learnable_momentum": True, "steps": 2}, r"model\.{kind}\.learnable_momentum: needs update: heavy_ball"),
        (
            {"update": "nesterov", "learnable_momentum": True, "momentum": 0.0, "steps": 2},
            r"model\.{kind}\.learnable_momentum: needs momentum > 0",
        ),
        (
            {"update": "nesterov", "learnable_momentum": True},
            r"model\.{kind}\.learnable_momentum: has no effect at T = 1",
        ),
        (
            {"update": "nesterov", "learnable_momentum": True, "steps": 2, "depth_mode": "reuse"},
            r"model\.{kind}\.learnable_momentum: has no effect at T = 1",
        ),
    ],
)
def test_bad_momentum_options_are_one_error_naming_the_key(kind, name, sub, match):
    with pytest.raises(ConfigError, match=match.format(kind=kind)):
        build_model({"size": "tiny", kind: {"name": name, **sub}})


# -- memory: truncated backprop keeps momentum's peak near one step's (docs/design/energy-lens.md#s11-1-momentum) ---------
def test_truncated_heavy_ball_at_eight_steps_peaks_near_one_step(monkeypatch):
    """T = 8 heavy ball with backprop_steps: 1 peaks at <= 1.3x the memory of T = 1 in a
    training step (measured 1.13x here: one layer, d_model 64, J = 128; 4.6x without
    truncation; at d_model 128, J = 256, 1.17x and 5.2x, in 2.5x the time): the frozen steps
    keep no graph, only the constants x and v."""
    from cem_ablate.bench.measure import step_peak_bytes

    # the kernel as trained: small_blocks' 3-row query blocks made this test 43 blocks per
    # step at J = 128, 5-8x slower (measured 43-148 s in pytest against 9.7 s)
    monkeypatch.setattr(kernels, "BLOCK_ROWS", PRODUCTION_BLOCK_ROWS)

    def peak(sub):
        torch.manual_seed(0)
        model = build_model(
            {
                "d_model": 64,
                "n_layers": 1,
                "n_heads": 4,
                "d_mlp": 128,
                "vocab_size": 256,
                "attention": {"name": "cem", **sub},
                "mlp": {"name": "cem", **sub},
            }
        )
        ids = torch.randint(0, 256, (2, 128))

        def step(batch):
            logits = model(batch)
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.flatten()).backward()
            model.zero_grad(set_to_none=False)  # gradients stay allocated: the step's peak is its own

        step(ids)
        return step_peak_bytes(step, ids)

    one_step = peak({"steps": 1})
    truncated = peak({"steps": 8, "update": "heavy_ball", "backprop_steps": 1})
    full = peak({"steps": 8, "update": "heavy_ball"})
    assert truncated <= 1.3 * one_step
    assert full > 2 * one_step  # the measurement sees the stored steps
