"""The head and the loss as one unit: final norm, LM head, next-token cross-entropy.

    loss = head_loss(hidden, norm, lm_head.weight, targets, impl="chunked")

One owner for the step's last part: the training module (`LanguageModelModule`) and
the benchmark's step (`bench.train_step`) both call `head_loss_unit`, so the bench
times exactly what training runs ("training = bench").

Two implementations of the same function (mean cross-entropy over the targets that
are not `ignore_index`, on logits upcast to at least float32, docs/design/experiments.md#s7-training-recipe):

- `plain`: `cross_entropy(lm_head(norm(h)).float(), targets)`, autograd as usual. It
  materializes the (N, vocab) logits and their fp32 copy and gradient: at 16,384 tokens
  x 32,000 words that is ~19 GB of memory traffic per step on a GPU.
- `chunked`: the tokens are cut into chunks of `chunk_tokens` rows; each chunk's
  logits are computed, reduced to its loss, and turned straight into the gradients of
  the normed hidden states and of the head weight (softmax - one-hot, the closed form
  of the cross-entropy's gradient), inside the forward. Only one chunk's logits live
  at a time and nothing is recomputed; the backward scales the stored gradients by the
  incoming scalar. The GEMMs see the same dtypes as the plain path under autocast (the
  logits' gradient enters them in the logits' dtype), so the two agree to rounding:
  float64 to 1e-12, float32 to a few ulps (tests/training/test_head_loss.py).

`auto` (the default of `train.loss_impl`) is `chunked` on CUDA and `plain` elsewhere:
CPU runs keep bit-identical losses to earlier versions, and the GPU gets the fast path.
`torch.nn.functional.linear_cross_entropy` (torch 2.13) has a chunked mode too, but
torch.compile falls back to eager at it (its docstring), and the unit must compile
with `fullgraph=True`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

LOSS_IMPLS = ("auto", "chunked", "plain")
LossImpl = Literal["chunked", "plain"]  # a resolved implementation (`auto` is resolved per device)
# cross_entropy's own default; the training module passes data.mqar.IGNORE_INDEX (the
# same -100) explicitly. Not imported here: data.mqar pulls in Lightning, the bench does not.
TORCH_IGNORE_INDEX = -100
# 4,096 tokens x 32,000 words: 512 MiB of fp32 logits per chunk, 4 chunks at the GPU
# bench's 16,384 tokens (the full logits would be 2 GiB, plus copies and gradients).
CHUNK_TOKENS = 4096


def resolve_loss_impl(impl: str, device_type: str) -> LossImpl:
    """`auto` -> `chunked` on CUDA, `plain` elsewhere (bit-identical CPU losses)."""
    if impl not in LOSS_IMPLS:
        raise ValueError(f"unknown loss implementation {impl!r}; choose from {LOSS_IMPLS}")
    if impl == "auto":
        return "chunked" if device_type == "cuda" else "plain"
    return "chunked" if impl == "chunked" else "plain"


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    """Low-precision logits to float32 for the softmax; float32/float64 stay as they are."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def head_loss(
    hidden: torch.Tensor,
    norm: nn.Module,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    impl: str = "plain",
    chunk_tokens: int = CHUNK_TOKENS,
    ignore_index: int = TORCH_IGNORE_INDEX,
) -> torch.Tensor:
    """Mean next-token cross-entropy of `lm_head(norm(hidden))` against `targets`.

    hidden (..., D), targets (...) of the same leading shape, weight (vocab, D) (the
    bias-free LM head, docs/design/layers.md#s1-llama-baseline). `impl` is `plain` or `chunked` (resolve `auto` first).
    """
    if impl == "plain":
        logits = F.linear(norm(hidden), weight)
        return F.cross_entropy(_upcast(logits).flatten(0, -2), targets.flatten(), ignore_index=ignore_index)
    if impl != "chunked":
        raise ValueError(f"head_loss impl must be 'plain' or 'chunked', got {impl!r}")
    x = norm(hidden).flatten(0, -2)
    targets = targets.flatten()
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _ChunkedLinearCrossEntropy.apply(x, weight, targets, chunk_tokens, ignore_index)
    return _chunked_loss_and_grads(x, weight, targets, chunk_tokens, ignore_index, with_grads=False)[0]


def _chunked_loss_and_grads(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_tokens: int,
    ignore_index: int,
    with_grads: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(loss, d loss/dx, d loss/dweight) chunk by chunk; the gradients are None unless asked.

    d loss/d logits_i = (softmax(logits_i) - onehot(t_i)) / n_valid for a valid row i,
    0 for an ignored one; it enters the two GEMMs in the logits' dtype, as autograd's
    backward of `.float()` hands it to the linear layer's backward.
    """
    valid = targets != ignore_index
    count = valid.sum()
    safe_targets = torch.where(valid, targets, 0)  # ignored rows gather a real column, masked below
    total: torch.Tensor | None = None
    grad_x_parts: list[torch.Tensor] = []
    grad_w: torch.Tensor | None = None
    for start in range(0, x.shape[0], chunk_tokens):
        xc = x[start : start + chunk_tokens]
        tc = safe_targets[start : start + chunk_tokens, None]
        vc = valid[start : start + chunk_tokens]
        logits = F.linear(xc, weight)
        z = _upcast(logits)
        lse = torch.logsumexp(z, dim=-1)
        losses = torch.where(vc, lse - z.gather(1, tc).squeeze(1), 0.0)
        total = losses.sum() if total is None else total + losses.sum()
        if with_grads:
            # in place over the chunk's logits (no longer needed): softmax, - one-hot, / n_valid
            grad_z = z.sub_(lse[:, None]).exp_()
            grad_z.scatter_add_(1, tc, -torch.ones_like(tc, dtype=z.dtype))
            grad_z.mul_((vc.to(z.dtype) / count)[:, None])
            grad_logits = grad_z.to(logits.dtype)
            grad_x_parts.append(torch.matmul(grad_logits, weight).to(x.dtype))
            part = torch.matmul(grad_logits.t(), xc).to(weight.dtype)
            grad_w = part if grad_w is None else grad_w + part
    if total is None:  # zero tokens: no chunk ran (the plain path returns nan there)
        raise TypeError("chunked head_loss got zero tokens")
    loss = total / count
    if not with_grads:
        return loss, None, None
    return loss, torch.cat(grad_x_parts), grad_w


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Loss forward with its gradients computed chunk by chunk (never the full logits)."""

    # `ctx` is torch's backward node; its stub types `saved_tensors` as a 1-tuple, so Any.
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk_tokens: int,
        ignore_index: int,
    ) -> torch.Tensor:
        loss, grad_x, grad_w = _chunked_loss_and_grads(x, weight, targets, chunk_tokens, ignore_index, with_grads=True)
        ctx.save_for_backward(grad_x, grad_w)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None, None]:
        grad_x, grad_w = ctx.saved_tensors
        return grad_x * grad_loss.to(grad_x.dtype), grad_w * grad_loss.to(grad_w.dtype), None, None, None


HeadLoss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def head_loss_unit(
    model: nn.Module,
    impl: str,
    *,
    compile: bool = False,
    chunk_tokens: int = CHUNK_TOKENS,
    ignore_index: int = TORCH_IGNORE_INDEX,
    backend: str = "inductor",
) -> HeadLoss:
    """`(hidden, targets) -> loss` over `model.norm` and `model.lm_head` (impl resolved).

    `compile=True` compiles the unit as one graph (`fullgraph=True`, static shapes, as
    the bench and `train.compile` compile each block): norm, head GEMM, softmax and the
    gradients' elementwise work fuse around the GEMMs; `backend` is torch.compile's.
    """
    if impl not in ("plain", "chunked"):
        raise ValueError(f"resolve {impl!r} with resolve_loss_impl first")
    if getattr(model.lm_head, "bias", None) is not None:
        raise ValueError("head_loss expects a bias-free LM head (docs/design/layers.md#s1-llama-baseline)")

    def unit(hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # torch's Module.__getattr__ types a submodule or parameter as Tensor | Module
        return head_loss(
            hidden,
            cast(nn.Module, model.norm),
            cast(nn.Linear, model.lm_head).weight,
            targets,
            impl=impl,
            chunk_tokens=chunk_tokens,
            ignore_index=ignore_index,
        )

    return torch.compile(unit, fullgraph=True, dynamic=False, backend=backend) if compile else unit
