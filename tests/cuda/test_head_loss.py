"""The head + loss unit and fused AdamW on CUDA. NOT YET RUN: written on a machine
without a GPU; the CPU suite holds the unit to float64 (tests/training)."""

from __future__ import annotations

import pytest
import torch

from cem_ablate import build_model
from cem_ablate.bench.train_step import make_optimizer
from cem_ablate.training.head_loss import head_loss_unit, resolve_loss_impl

pytestmark = pytest.mark.cuda
CUDA = torch.device("cuda")


def _model_and_batch(vocab=32000, tokens=(4, 2100)):
    torch.manual_seed(0)
    model = build_model({"size": "tiny", "vocab_size": vocab, "max_seq_len": tokens[1]}).to(CUDA)
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(*tokens, model.dims.d_model, generator=g).to(CUDA).requires_grad_(True)
    targets = torch.randint(0, vocab, tokens, generator=g).to(CUDA)
    targets[0, :100] = -100
    return model, hidden, targets


def _loss_grads(unit, model, hidden, targets, bf16):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = unit(hidden, targets)
    grads = torch.autograd.grad(loss, [hidden, model.lm_head.weight, model.norm.weight])
    return loss.float(), grads


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("bf16", [False, True])
def test_compiled_chunked_unit_matches_plain_on_cuda(bf16, exact_fp32):
    """8,400 tokens x 32,000 words: three 4,096-token chunks, the last ragged."""
    assert resolve_loss_impl("auto", "cuda") == "chunked"
    model, hidden, targets = _model_and_batch()
    plain = _loss_grads(head_loss_unit(model, "plain"), model, hidden, targets, bf16)
    torch._dynamo.reset()
    chunked = _loss_grads(head_loss_unit(model, "chunked", compile=True), model, hidden, targets, bf16)
    tol = 2e-2 if bf16 else 1e-5  # bf16: both round the GEMM inputs the same way; sums differ in order
    assert _rel(chunked[0], plain[0]) < (1e-3 if bf16 else 1e-6)
    for got, want in zip(chunked[1], plain[1]):
        assert torch.isfinite(got).all() and _rel(got, want) < tol


def test_chunked_unit_holds_less_memory_than_the_full_logits():
    """16,400 tokens (the GPU bench's 8 x 2048, and a ragged chunk): one 4,096-token
    chunk's temporaries at a time instead of the whole logits' (about a quarter)."""
    model, hidden, targets = _model_and_batch(tokens=(8, 2050))
    peaks = {}
    for impl in ("plain", "chunked"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        _loss_grads(head_loss_unit(model, impl), model, hidden, targets, bf16=True)
        torch.cuda.synchronize()
        peaks[impl] = torch.cuda.max_memory_allocated() - start
    logits_fp32 = hidden.shape[0] * hidden.shape[1] * 32000 * 4
    assert peaks["plain"] > logits_fp32 and peaks["chunked"] < 0.6 * peaks["plain"], peaks


def test_bench_and_training_step_with_fused_adamw_on_cuda():
    model = build_model({"size": "tiny", "vocab_size": 256}).to(CUDA)
    optimizer = make_optimizer(model)
    assert optimizer.defaults["fused"] is True
    model(torch.randint(0, 256, (2, 16), device=CUDA)).float().square().mean().backward()
    optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
