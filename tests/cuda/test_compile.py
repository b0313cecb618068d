"""torch.compile(fullgraph=True) of every registered variant on CUDA.

The CPU zoo of tests/components/test_compile.py (every registered attention and MLP,
the CEM options that change the code path, reuse and per-step checkpointing) runs on
the GPU, where `kernel: auto` resolves to FlexAttention, so the compiled graph holds
the flex HOP (inlined, with its captured-buffer gradients), the blocked kernel's
autograd.Function (`diag_update: exact`) and the SDPA path's (memory-efficient
kernel). fullgraph raises on any graph break; compiled and eager must agree in fp32.
"""

from __future__ import annotations

import pytest
import torch

import components.cem_attention_kernels as kernels
from cem_ablate import build_model
from tests.components.test_compile import BLOCKS, DIMS, Zoo

pytestmark = pytest.mark.cuda

CUDA_DIMS = {**DIMS, "d_model": 64, "d_mlp": 96}  # head dim 16: FlexAttention's minimum


class CudaZoo(Zoo):
    """The CPU zoo's blocks at head dim 16, so that `auto` resolves to flex."""

    def __init__(self):
        super().__init__()
        for i, (attention, mlp) in enumerate(BLOCKS):
            torch.manual_seed(i)
            block = build_model({**CUDA_DIMS, "attention": attention, "mlp": mlp}).blocks[0]
            with torch.no_grad():
                for name, p in block.named_parameters():
                    if "kq_diag" in name or "self_bias" in name or name.endswith("precond.v"):
                        p.normal_(0.0, 0.1)
            self.blocks[i] = block


def test_the_zoo_runs_every_kernel_on_cuda():
    cuda = torch.device("cuda")
    kernels_of = [getattr(block.attention, "resolved_kernel", lambda device: None)(cuda) for block in CudaZoo().blocks]
    assert {"flex", "blocked", "sdpa"} <= set(kernels_of), kernels_of
    narrow = [getattr(block.attention, "resolved_kernel", lambda device: None)(cuda) for block in Zoo().blocks]
    assert "flex" not in narrow  # head dim 8: auto keeps the blocked kernel


def test_every_variant_compiles_fullgraph_on_cuda_and_matches_eager(monkeypatch, exact_fp32):
    """Each block compiled on its own (fullgraph), so that a gap names its block."""
    monkeypatch.setattr(kernels, "BLOCK_ROWS", 8)  # several query blocks at J = 20
    torch._dynamo.reset()
    zoo = CudaZoo().cuda()
    h = torch.randn(2, 20, CUDA_DIMS["d_model"], generator=torch.Generator().manual_seed(0)).cuda()

    def run(fn, block):
        x = h.clone().requires_grad_(True)
        out = fn(x)
        grads = torch.autograd.grad(out.square().mean(), [x, *block.parameters()])
        return out.detach(), grads

    gaps = {}
    for i, block in enumerate(zoo.blocks):
        eager_out, eager_grads = run(block, block)
        compiled_out, compiled_grads = run(torch.compile(block, fullgraph=True), block)  # raises on a graph break
        names = ["output", "input"] + [n for n, _ in block.named_parameters()]
        for name, a, b in zip(names, [compiled_out, *compiled_grads], [eager_out, *eager_grads]):
            assert torch.isfinite(a).all(), (i, name)
            gaps[f"block {i} ({BLOCKS[i][0]['name']}/{BLOCKS[i][1]['name']}) {name}"] = (
                a - b
            ).abs().max().item() / max(1.0, b.abs().max().item())
    worst = sorted(gaps.items(), key=lambda kv: -kv[1])[:6]
    print("largest compiled-vs-eager gaps (relative to max(1, max |eager|)):", worst)
    assert worst[0][1] <= 1e-4, worst


def test_compiled_bf16_block_step_is_finite_and_close_to_eager():
    """The bench's compiled mode: a block under bf16 autocast, forward and backward."""
    torch._dynamo.reset()
    zoo = CudaZoo().cuda()
    h = torch.randn(2, 20, CUDA_DIMS["d_model"], generator=torch.Generator().manual_seed(1)).cuda()

    def run(fn):
        x = h.clone().requires_grad_(True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = fn(x)
        grad = torch.autograd.grad(out.float().square().mean(), [x])[0]
        return out.float().detach(), grad

    eager_out, eager_grad = run(zoo)
    compiled_out, compiled_grad = run(torch.compile(zoo, fullgraph=True))
    assert torch.isfinite(compiled_out).all() and torch.isfinite(compiled_grad).all()
    # bf16: 8 significant bits, five blocks deep (tests/cuda/test_kernels.py)
    assert ((compiled_out - eager_out).norm() / eager_out.norm()).item() < 2e-2
    assert ((compiled_grad - eager_grad).norm() / eager_grad.norm()).item() < 5e-2
