"""Every fast CEM path equals the reference path on CUDA.

The CPU suite holds the fast paths to the reference in float64 (tests/components);
here the GPU kernels run as training runs them: the FlexAttention kernel (compiled
Triton), the blocked kernel, and the SDPA path (CUTLASS memory-efficient kernel),
for every attention variant (KQ diagonal none / shared / per head x diagonal update
paper / exact), T = 1, 2, 4, forward and backward (the input and every parameter).
The reference is the explicit-scores path in float64 on the same GPU.

fp32: max |fast - ref| <= 1e-4 x max(1, max |ref|) per tensor (TF32 off).

Weights: the CPU tests draw every parameter at std 0.3, which at T = 4 makes the
layer so ill-conditioned (input gradients up to ~2e3 at D 64, ~2e4 at D 168) that
fp32 rounding alone moves gradients by 2-4e-4 of their maximum in *every* path,
flex and blocked alike (measured on an H100), and bf16 moves the reference path's
own gradients by 30-130% (measured on CPU): comparisons at that scale test the
conditioning, not the kernels. Here weights are drawn at std 0.09 (x 0.3), where
the function is well conditioned and both paths land near 0.5% in bf16.

bf16 (autocast, as `bf16-mixed` trains): bf16 keeps 8 significant bits, so every
matmul input is rounded by up to 2^-9 relative, and the errors of T steps and of
the backward's products add up to ~1e-2 relative, for the reference math itself
in bf16 just as for the kernels. A kernel is held to what bf16 allows, not to an
absolute number: its relative error ||fast - ref64|| / ||ref64|| must be at most
3x the reference path's own bf16 error, or 2e-2 when that is smaller (the SDPA path
also rounds the ALiBi + self-bias mask to bf16, which SDPA requires).
"""

from __future__ import annotations

import itertools

import pytest
import torch

import components.cem_attention_kernels as kernels
from tests.components.helpers import build_sublayer

pytestmark = pytest.mark.cuda

CUDA = torch.device("cuda")
KQ = ["none", "shared", "per_head"]
STEPS = [1, 2, 4]
DIMS = {"d_model": 64, "n_heads": 4, "d_mlp": 96}  # head dim 16
SEQ = 77  # not a multiple of 16 (SDPA mask alignment), 32 (blocked blocks below) or 128 (flex blocks)
FP32_TOL = 1e-4
BF16_FACTOR, BF16_FLOOR = 3.0, 2e-2


@pytest.fixture(autouse=True)
def several_blocks(monkeypatch):
    monkeypatch.setattr(kernels, "BLOCK_ROWS", 32)  # 3 query blocks at J = 77


def kernels_for(kq: str, update: str) -> list[str]:
    out = ["blocked"]
    if update == "paper":
        out.append("flex")  # `auto` never picks flex for `exact` (values D + d wide)
    if kq == "none":
        out.append("sdpa")
    return out


ATTENTION_CASES = [
    (kq, update, steps, kernel)
    for kq, update, steps in itertools.product(KQ, ["paper", "exact"], STEPS)
    if kq != "none" or update == "paper"
    for kernel in kernels_for(kq, update)
]


WEIGHT_SCALE = 0.3  # std 0.3 -> 0.09: well conditioned at T = 4 (module docstring)


def layers(kind: str, sub: dict, dims=DIMS, weight_scale: float = WEIGHT_SCALE):
    """(fast fp32, reference fp64) CUDA copies of one randomized sublayer."""
    fast = build_sublayer(kind, {**sub, "impl": "fast"}, **dims)
    with torch.no_grad():
        for name, p in fast.named_parameters():
            if not name.endswith("norm.weight"):
                p.mul_(weight_scale)
    ref = build_sublayer(kind, {**sub, "impl": "reference"}, **dims)
    ref.load_state_dict(fast.state_dict())
    return fast.float().to(CUDA), ref.double().to(CUDA)


def stream(d_model: int, seq: int = SEQ, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, seq, d_model, generator=g, dtype=torch.float64).to(CUDA)


def run(layer, h, dtype, bf16=False, fn=None) -> dict[str, torch.Tensor]:
    """The update out - h and the gradients of a generic cotangent, in float64. `fn`
    (default: `layer`) is what runs, e.g. the compiled layer; the gradients are those of
    `layer`'s parameters (a compiled module names them `_orig_mod.*`)."""
    h = h.to(dtype).clone().requires_grad_(True)
    with torch.autocast(CUDA.type, dtype=torch.bfloat16, enabled=bf16):
        out = (fn or layer)(h)
    weights = torch.linspace(-1, 1, out.numel(), device=CUDA, dtype=torch.float64).view_as(out)
    named = sorted(layer.named_parameters())
    grads = torch.autograd.grad((out.double() * weights).sum(), [h, *(p for _, p in named)])
    result = {"update": (out - h).detach().double()}
    result.update({name: g.double() for name, g in zip(["input"] + [n for n, _ in named], grads)})
    return result


def assert_fp32_close(fast: dict, ref: dict):
    assert fast.keys() == ref.keys()
    for name, r in ref.items():
        assert torch.isfinite(fast[name]).all(), name
        gap = (fast[name] - r).abs().max().item()
        assert gap <= FP32_TOL * max(1.0, r.abs().max().item()), f"{name}: max gap {gap:.3g}"


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def assert_bf16_close(fast: dict, ref_bf16: dict, ref: dict):
    for name, r in ref.items():
        if r.norm() == 0:  # e.g. the gradient of U when V = 0: nothing to compare
            continue
        assert torch.isfinite(fast[name]).all(), name
        allowed = max(BF16_FACTOR * rel(ref_bf16[name], r), BF16_FLOOR)
        assert rel(fast[name], r) <= allowed, f"{name}: {rel(fast[name], r):.3g} > {allowed:.3g}"


def check(kind: str, sub: dict, precision: str, dims=DIMS, seq=SEQ, expect_kernel=None):
    fast, ref = layers(kind, sub, dims)
    if expect_kernel is not None:
        assert fast.resolved_kernel(CUDA) == expect_kernel
    h = stream(dims["d_model"], seq)
    expected = run(ref, h, torch.float64)
    if precision == "fp32":
        assert_fp32_close(run(fast, h, torch.float32), expected)
    else:
        ref_bf16 = ref.float()  # the reference math under the same autocast
        assert_bf16_close(run(fast, h, torch.float32, bf16=True), run(ref_bf16, h, torch.float32, bf16=True), expected)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("kq,update,steps,kernel", ATTENTION_CASES)
def test_attention_kernel_equals_reference(kq, update, steps, kernel, precision, exact_fp32):
    sub = {
        "name": "cem",
        "steps": steps,
        "kq_diag": kq,
        "diag_update": update,
        "kernel": kernel,
        "preconditioner": {"name": "diag_lowrank", "rank": 3},
        "step_size": 0.7,
    }
    check("attention", sub, precision, expect_kernel=kernel)


@pytest.mark.parametrize(
    "kernel,kq,precision",
    [
        ("flex", "shared", "fp32"),
        ("flex", "shared", "bf16"),
        ("flex", "per_head", "bf16"),  # a flex compile each
        ("blocked", "shared", "fp32"),
        ("blocked", "shared", "bf16"),
        ("sdpa", "none", "fp32"),
        ("sdpa", "none", "bf16"),
    ],
)
def test_kernels_at_the_86m_head_dim(kernel, kq, precision, exact_fp32):
    """Head dim 84 (86M: D 672, 8 heads): not a power of two, nor a multiple of 16
    bytes in bf16 (SDPA pads it); J = 130 spans two 128-row flex blocks."""
    sub = {"name": "cem", "steps": 2, "kq_diag": kq, "kernel": kernel, "preconditioner": "diag"}
    check("attention", sub, precision, dims={"d_model": 168, "n_heads": 2, "d_mlp": 96}, seq=130)


@pytest.mark.parametrize(
    "kq,update", [("none", "paper"), ("shared", "paper"), ("per_head", "paper"), ("shared", "exact")]
)
def test_auto_selects_flex_on_cuda_except_for_exact(kq, update):
    fast, _ = layers("attention", {"name": "cem", "kq_diag": kq, "diag_update": update})
    assert fast.resolved_kernel(CUDA) == ("blocked" if update == "exact" else "flex")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("name", ["cem", "cem_param_matched"])
def test_mlp_fast_equals_reference(name, steps, precision, exact_fp32):
    check(
        "mlp",
        {"name": name, "steps": steps, "preconditioner": {"name": "diag_lowrank", "rank": 3}, "step_size": 0.8},
        precision,
    )


def test_checkpointed_steps_match_on_cuda(exact_fp32):
    """Per-step checkpointing recomputes flex in backward: same gradients as without."""
    sub = {"name": "cem", "steps": 3, "kq_diag": "shared", "learnable_step_size": True}
    fast, _ = layers("attention", {**sub, "checkpoint_steps": True})
    plain, _ = layers("attention", sub)
    plain.load_state_dict(fast.state_dict())
    h = stream(DIMS["d_model"])
    assert_fp32_close(run(fast, h, torch.float32), run(plain, h, torch.float32))
