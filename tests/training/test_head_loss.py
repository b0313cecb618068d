"""training/head_loss.py: the chunked head + loss unit equals the plain one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cem_ablate import build_model
from cem_ablate.training.head_loss import head_loss, head_loss_unit, resolve_loss_impl

VOCAB, D = 37, 12


def _case(dtype, n_batch=3, seq=11, seed=0, ignore=True):
    g = torch.Generator().manual_seed(seed)
    norm = torch.nn.RMSNorm(D, eps=1e-5).to(dtype)  # stand-in with the same math (a parameter gain)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * torch.randn(D, generator=g, dtype=dtype))
    weight = (0.5 * torch.randn(VOCAB, D, generator=g, dtype=dtype)).requires_grad_(True)
    hidden = torch.randn(n_batch, seq, D, generator=g, dtype=dtype).requires_grad_(True)
    targets = torch.randint(0, VOCAB, (n_batch, seq), generator=g)
    if ignore:
        targets[0, :4] = -100  # MQAR scores only some positions
        targets[2, 7] = -100
    return norm, weight, hidden, targets


def _loss_and_grads(impl, norm, weight, hidden, targets, **kw):
    loss = head_loss(hidden, norm, weight, targets, impl=impl, **kw)
    grads = torch.autograd.grad(loss, [hidden, weight, norm.weight])
    return loss.detach(), grads


def _oracle(norm, weight, hidden, targets):
    """The plain formula, written out: cross_entropy(lm_head(norm(h)))."""
    loss = F.cross_entropy(F.linear(norm(hidden), weight).flatten(0, 1), targets.flatten(), ignore_index=-100)
    return loss.detach(), torch.autograd.grad(loss, [hidden, weight, norm.weight])


@pytest.mark.parametrize("chunk", [1, 5, 7, 33, 4096])  # a row, ragged chunks, exactly N, one chunk
def test_chunked_equals_plain_in_float64(chunk):
    case = _case(torch.float64)
    expected_loss, expected_grads = _oracle(*case)
    for impl in ("plain", "chunked"):
        loss, grads = _loss_and_grads(impl, *case, chunk_tokens=chunk)
        assert torch.allclose(loss, expected_loss, rtol=0, atol=1e-10), impl
        for name, g, e in zip(["hidden", "weight", "norm"], grads, expected_grads):
            assert g.dtype == e.dtype and g.shape == e.shape
            assert (g - e).abs().max().item() <= 1e-10 * max(1.0, e.abs().max().item()), (impl, name)


def test_chunked_is_close_in_float32_and_plain_is_the_old_training_formula():
    case = _case(torch.float32, n_batch=4, seq=64)
    norm, weight, hidden, targets = case
    plain, plain_grads = _loss_and_grads("plain", *case)
    chunked, chunked_grads = _loss_and_grads("chunked", *case, chunk_tokens=50)
    assert torch.allclose(chunked, plain, rtol=1e-6, atol=0)
    for g, e in zip(chunked_grads, plain_grads):
        assert torch.allclose(g, e, rtol=1e-5, atol=1e-7)
    # `plain` is what the training step computed before the unit existed, bit for bit
    old = F.cross_entropy(F.linear(norm(hidden), weight).flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
    assert torch.equal(plain, old.detach())


def test_chunked_without_gradients_returns_the_same_loss():
    norm, weight, hidden, targets = case = _case(torch.float64)
    with torch.no_grad():
        loss = head_loss(hidden, norm, weight, targets, impl="chunked", chunk_tokens=4)
    assert not loss.requires_grad and torch.allclose(loss, _oracle(*case)[0], rtol=0, atol=1e-12)


def test_chunked_backward_scales_with_the_upstream_gradient():
    norm, weight, hidden, targets = _case(torch.float64)
    (3.0 * head_loss(hidden, norm, weight, targets, impl="chunked", chunk_tokens=8)).backward()
    grad = hidden.grad.clone()
    hidden.grad = None
    (3.0 * head_loss(hidden, norm, weight, targets, impl="plain")).backward()
    assert torch.allclose(grad, hidden.grad, atol=1e-12)


def test_auto_is_chunked_on_cuda_and_plain_elsewhere():
    assert resolve_loss_impl("auto", "cuda") == "chunked"
    assert resolve_loss_impl("auto", "cpu") == "plain"
    assert resolve_loss_impl("chunked", "cpu") == "chunked" and resolve_loss_impl("plain", "cuda") == "plain"
    with pytest.raises(ValueError, match="fused"):
        resolve_loss_impl("fused", "cpu")


def test_the_unit_on_a_model_compiles_as_one_graph():
    """fullgraph=True raises on a graph break; compiled and eager agree in fp32."""
    torch.manual_seed(0)
    model = build_model({"size": "tiny", "vocab_size": 64, "max_seq_len": 16})
    hidden = torch.randn(2, 16, model.dims.d_model, requires_grad=True)
    targets = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    results = []
    for compile in (False, True):
        unit = head_loss_unit(model, "chunked", compile=compile, chunk_tokens=12)
        loss = unit(hidden, targets)
        grads = torch.autograd.grad(loss, [hidden, model.lm_head.weight, model.norm.weight])
        results.append((loss.detach(), grads))
    (eager, eager_grads), (compiled, compiled_grads) = results
    assert torch.allclose(compiled, eager, rtol=1e-5)
    for g, e in zip(compiled_grads, eager_grads):
        assert torch.allclose(g, e, rtol=1e-4, atol=1e-6)
    plain = head_loss_unit(model, "plain")(hidden, targets)
    assert torch.allclose(plain, eager, rtol=1e-5)
