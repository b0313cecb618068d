"""Fast exact kernels for the CEM attention core (SPEC §2), with their selection logic.

The core computes, per head k and causal position pairs j <= i,

    s_ijk = scale (q_ik · k_jk) + e_ijk - m_k (i - j) + beta_k [i = j]
    o_ik  = Σ_j softmax_j(s_ijk) v_jk

where e is the KQ-diagonal score (u_i ⊙ delta_k) · c_j / tau (SPEC §2): one (B, J, J)
matrix shared by all heads (`kq_diag: shared`) or one per head (`per_head`), absent
for `none`. It is passed as "extra queries" qe (B, 1 or K, J, D) = u ⊙ delta / tau
and "extra keys" c (B, J, D), so that the kernel computes only its causal half.

Why not plain SDPA: the flash kernel (CPU and GPU) takes at most a mask that does
not require grad, but beta and e are learnable (NOTES.md: a mask requiring grad falls
back silently to the slow math kernel, and so do 3-D masks). Three exact kernels:

- `blocked` (CPU default): an autograd.Function that walks query blocks of
  `BLOCK_ROWS` rows, and for each block touches only the keys j < block end (causal
  skipping: 5/8 of the score matrix at 4 blocks instead of all of it), builds the
  scores with one fused baddbmm on top of the ALiBi/e bias, and writes its own
  backward: dS = P ⊙ (dP - rowsum(dO ⊙ O)), from which the grads of q, k, v, beta
  (the diagonal of dS) and e (dS summed over heads for a shared diagonal) follow.
- `sdpa` (no KQ diagonal only): PyTorch's flash kernel with the constant ALiBi +
  beta mask, detached; the beta gradient is recovered exactly from the diagonal
  probabilities p_iik = exp(s_iik - logsumexp_i), so the mask never needs grad.
- `flex` (CUDA): FlexAttention with a score_mod adding ALiBi, beta and e; it has a
  backward on GPU (not on CPU, NOTES.md), so it is selected only there.

`reference` is the explicit autograd math of `CEMAttention._scores` (the slow path),
kept selectable so tests can compare every kernel against it in float64.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from components.alibi import alibi_slopes

BLOCK_ROWS = 128  # query rows per block of the blocked kernel (measured best at J = 512 on CPU)
KERNELS = ("blocked", "sdpa", "flex", "reference")


def flex_attention_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


FLEX_AVAILABLE = flex_attention_available()  # resolved once: kernel selection runs inside compiled graphs


def select_kernel(device_type: str, has_kq_diag: bool, flex_available: bool | None = None) -> str:
    """The fastest exact kernel for a device: flex on CUDA (it has a backward there),
    blocked on CPU. `sdpa` is never chosen automatically for a KQ diagonal (its
    learnable scores would need a mask that requires grad) and on CPU it was measured
    slower than `blocked` at the benchmark sizes (benchmarks/README.md)."""
    if flex_available is None:
        flex_available = FLEX_AVAILABLE
    if device_type == "cuda" and flex_available:
        return "flex"
    return "blocked"


def causal_alibi(n_heads: int, seq_len: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(K, J, J) ALiBi bias -m_k (i - j) on j <= i and -inf above the diagonal (SPEC §2),
    without the self bias (which kernels add so that its gradient stays exact)."""
    pos = torch.arange(seq_len, device=device)
    dist = (pos[:, None] - pos[None, :]).to(dtype)
    slopes = alibi_slopes(n_heads).to(dtype=dtype, device=device)
    return (-slopes[:, None, None] * dist).masked_fill(dist < 0, float("-inf"))


def cem_attention_core(
    kernel: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    self_bias: torch.Tensor,
    alibi: torch.Tensor,
    scale: float,
    qe: torch.Tensor | None = None,
    ce: torch.Tensor | None = None,
) -> torch.Tensor:
    """o (B, K, J, dv) for q, k (B, K, J, d), v (B, K, J, dv); see the module docstring."""
    if kernel == "blocked":
        return BlockedCausalAttention.apply(q, k, v, self_bias, alibi, scale, qe, ce, BLOCK_ROWS)
    if kernel == "sdpa":
        if qe is not None:
            raise ValueError("the sdpa kernel has no KQ-diagonal scores; use 'blocked'")
        return SDPAAlibiAttention.apply(q, k, v, self_bias, alibi, scale)
    if kernel == "flex":
        return flex_cem_attention(q, k, v, self_bias, alibi, scale, qe, ce)
    if kernel == "reference":
        return reference_attention(q, k, v, self_bias, alibi, scale, qe, ce)
    raise ValueError(f"unknown CEM attention kernel {kernel!r}; choose from {KERNELS}")


def reference_attention(q, k, v, self_bias, alibi, scale, qe=None, ce=None):
    """The explicit (B, K, J, J) math, differentiated by autograd."""
    j = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) * scale + alibi + self_bias[:, None, None] * torch.eye(j, dtype=q.dtype,
                                                                                         device=q.device)
    if qe is not None:
        s = s + qe @ ce.unsqueeze(1).transpose(-1, -2)
    return torch.softmax(s, dim=-1) @ v


def _low_precision(dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


class BlockedCausalAttention(torch.autograd.Function):
    """Exact causal attention with ALiBi, a learnable diagonal bias and optional
    learnable KQ-diagonal scores, computed by query blocks that skip masked keys.

    Probabilities are kept (in float32 for bf16/fp16 inputs) for the backward: at
    4 blocks they take 5/8 of one (B, K, J, J) tensor. Recursion-step checkpointing
    (`checkpoint_steps`) frees them between forward and backward when memory matters.
    """

    @staticmethod
    def forward(ctx, q, k, v, self_bias, alibi, scale, qe, ce, block_rows):
        b, heads, j, d = q.shape
        dv = v.shape[-1]
        dtype = q.dtype
        low = _low_precision(dtype)
        sdtype = torch.float32 if low else dtype  # scores and probabilities
        k, v = k.to(dtype), v.to(dtype)
        if qe is not None:
            qe, ce = qe.to(sdtype), ce.to(sdtype)
        bounds = list(range(0, j, block_rows)) + [j]
        beta = self_bias.to(sdtype)
        alibi = alibi.to(sdtype)
        out = torch.empty(b, heads, j, dv, dtype=dtype, device=q.device)
        probs = []
        with torch.autocast(q.device.type, enabled=False):
            for r0, r1 in zip(bounds[:-1], bounds[1:]):
                rows = r1 - r0
                bias = _add_diagonal(alibi[:, r0:r1, :r1], beta, r0)  # (K, R, r1)
                if qe is not None:  # e for these rows: (B, 1|K, R, r1), one matmul
                    s = torch.matmul(qe[:, :, r0:r1], ce[:, None, :r1].transpose(-1, -2)) + bias
                else:
                    s = bias.expand(b, heads, rows, r1).contiguous()
                qb = q[:, :, r0:r1].reshape(b * heads, rows, d)
                kb = k[:, :, :r1].reshape(b * heads, r1, d)
                s3 = s.view(b * heads, rows, r1)
                if low:
                    s3.add_(torch.bmm(qb, kb.transpose(1, 2)), alpha=scale)
                else:
                    s3.baddbmm_(qb, kb.transpose(1, 2), alpha=scale)
                p = torch.softmax(s3, dim=-1)
                vb = v[:, :, :r1].reshape(b * heads, r1, dv)
                out[:, :, r0:r1] = torch.bmm(p.to(dtype), vb).view(b, heads, rows, dv)
                probs.append(p)
        ctx.save_for_backward(q, k, v, out, qe, ce, *probs)
        ctx.bounds, ctx.scale = bounds, scale
        ctx.e_heads = None if qe is None else qe.shape[1]
        ctx.bias_dtype = self_bias.dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, qe, ce, *probs = ctx.saved_tensors
        bounds, scale, e_heads = ctx.bounds, ctx.scale, ctx.e_heads
        b, heads, j, d = q.shape
        dv = v.shape[-1]
        dtype = q.dtype
        sdtype = probs[0].dtype
        grad_out = grad_out.to(dtype)
        grad_q = torch.empty_like(q)
        grad_k = torch.zeros_like(k)
        grad_v = torch.zeros_like(v)
        grad_beta = torch.zeros(heads, dtype=sdtype, device=q.device)
        grad_qe = grad_ce = None
        if qe is not None:
            grad_qe = torch.empty_like(qe)
            grad_ce = torch.zeros_like(ce)
        # D_i = Σ_j p_ij dP_ij = dO_i · O_i, the softmax-backward row term
        row_term = (grad_out.to(sdtype) * out.to(sdtype)).sum(-1, keepdim=True)
        with torch.autocast(q.device.type, enabled=False):
            for (r0, r1), p in zip(zip(bounds[:-1], bounds[1:]), probs):
                rows = r1 - r0
                g = grad_out[:, :, r0:r1].reshape(b * heads, rows, dv)
                vb = v[:, :, :r1].reshape(b * heads, r1, dv)
                kb = k[:, :, :r1].reshape(b * heads, r1, d)
                qb = q[:, :, r0:r1].reshape(b * heads, rows, d)
                grad_v[:, :, :r1] += torch.bmm(p.to(dtype).transpose(1, 2), g).view(b, heads, r1, dv)
                ds = torch.bmm(g, vb.transpose(1, 2)).to(sdtype)
                ds.sub_(row_term[:, :, r0:r1].reshape(b * heads, rows, 1)).mul_(p)  # dS
                ds4 = ds.view(b, heads, rows, r1)
                grad_beta += torch.diagonal(ds4[..., r0:r1], dim1=-2, dim2=-1).sum((0, 2))
                if qe is not None:
                    ds_e = ds4.sum(1, keepdim=True) if e_heads == 1 else ds4  # (B, 1|K, R, r1)
                    grad_qe[:, :, r0:r1] = torch.matmul(ds_e, ce[:, None, :r1])
                    grad_ce[:, :r1] += torch.matmul(ds_e.transpose(-1, -2), qe[:, :, r0:r1]).sum(1)
                dsl = ds.to(dtype)
                grad_q[:, :, r0:r1] = torch.bmm(dsl, kb).mul_(scale).view(b, heads, rows, d)
                grad_k[:, :, :r1] += torch.bmm(dsl.transpose(1, 2), qb).mul_(scale).view(b, heads, r1, d)
        return (grad_q, grad_k, grad_v, grad_beta.to(ctx.bias_dtype), None, None,
                grad_qe, grad_ce, None)


def _add_diagonal(bias: torch.Tensor, beta: torch.Tensor, r0: int) -> torch.Tensor:
    """bias (K, R, C) + beta_k on the entries (i, i + r0): the self-token bias of a block."""
    rows = bias.shape[1]
    eye = torch.zeros(rows, bias.shape[2], dtype=bias.dtype, device=bias.device)
    eye[:, r0:r0 + rows] = torch.eye(rows, dtype=bias.dtype, device=bias.device)
    return bias + beta[:, None, None] * eye


class SDPAAlibiAttention(torch.autograd.Function):
    """PyTorch's CPU flash kernel with the constant ALiBi + beta mask (no KQ diagonal).

    The mask is built from a detached beta so the flash kernel is used; the exact beta
    gradient is Σ_i dS_iik = Σ_i p_iik (dO_i · v_i - dO_i · O_i), with the diagonal
    probability p_iik = exp(s_iik - logsumexp_i) recovered from the kernel's logsumexp.
    """

    @staticmethod
    def forward(ctx, q, k, v, self_bias, alibi, scale):
        j = q.shape[-2]
        eye = torch.eye(j, dtype=q.dtype, device=q.device)
        mask = (alibi.to(q.dtype) + self_bias.detach().to(q.dtype)[:, None, None] * eye).unsqueeze(0)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse, mask, self_bias)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, mask, self_bias = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_q, grad_k, grad_v = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, 0.0, False, attn_mask=mask, scale=ctx.scale)
        sdtype = torch.float32 if _low_precision(q.dtype) else q.dtype
        s_diag = ctx.scale * (q * k).sum(-1, dtype=sdtype) + self_bias.to(sdtype)[:, None]  # ALiBi is 0 on i = j
        p_diag = torch.exp(s_diag - lse.to(sdtype))
        ds_diag = p_diag * ((grad_out * v).sum(-1, dtype=sdtype) - (grad_out * out).sum(-1, dtype=sdtype))
        return grad_q, grad_k, grad_v, ds_diag.sum((0, 2)).to(self_bias.dtype), None, None


def flex_cem_attention(q, k, v, self_bias, alibi, scale, qe=None, ce=None):
    """FlexAttention (GPU training; CPU forward only): ALiBi, beta and e in a score_mod."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    heads, j = q.shape[1], q.shape[2]
    sdtype = torch.float32 if _low_precision(q.dtype) else q.dtype
    slopes = alibi_slopes(heads).to(dtype=sdtype, device=q.device)
    beta = self_bias.to(sdtype)
    e = None if qe is None else torch.matmul(qe, ce.unsqueeze(1).transpose(-1, -2)).to(sdtype)  # (B, 1|K, J, J)
    e_per_head = e is not None and e.shape[1] > 1

    def score_mod(score, b, h, q_idx, kv_idx):
        score = score + slopes[h] * (kv_idx - q_idx) + torch.where(q_idx == kv_idx, beta[h], 0.0)
        if e is not None:
            score = score + e[b, h if e_per_head else 0, q_idx, kv_idx]
        return score

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=j, KV_LEN=j, device=q.device)
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
