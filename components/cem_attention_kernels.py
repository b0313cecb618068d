"""Fast exact kernels for the CEM attention core (docs/design/layers.md#s2-cem-attention), with their selection logic.

The core computes, per head k and causal position pairs j <= i,

    s_ijk = scale (q_ik · k_jk) + e_ijk - m_k (i - j) + beta_k [i = j]
    o_ik  = Σ_j softmax_j(s_ijk) v_jk

where e is the KQ-diagonal score (u_i ⊙ delta_k) · c_j / tau (docs/design/layers.md#s2-cem-attention): one (B, J, J)
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

import functools

import torch

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


# FlexAttention's Triton kernel needs head dims of at least 16 (torch 2.11: "NYI:
# embedding dimension of the query, key, and value must be at least 16").
FLEX_MIN_HEAD_DIM = 16


def select_kernel(
    device_type: str, wide_values: bool = False, flex_available: bool | None = None, head_dim: int | None = None
) -> str:
    """The kernel `kernel: auto` runs: flex on CUDA (it has a backward there), blocked
    elsewhere, for `diag_update: exact`, whose values are D + d wide (untested with
    flex), and for heads narrower than FlexAttention takes. `sdpa` is never chosen
    automatically: it cannot take a KQ diagonal, and on CPU it was not faster than
    `blocked` without one (benchmarks/README.md)."""
    if flex_available is None:
        flex_available = FLEX_AVAILABLE
    narrow = head_dim is not None and head_dim < FLEX_MIN_HEAD_DIM
    if device_type == "cuda" and flex_available and not wide_values and not narrow:
        return "flex"
    return "blocked"


def causal_alibi(n_heads: int, seq_len: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(K, J, J) ALiBi bias -m_k (i - j) on j <= i (docs/design/layers.md#s2-cem-attention), without the self bias
    (kernels add it so that its gradient stays exact).

    Entries above the diagonal hold the most negative finite value instead of -inf:
    exp underflows to exactly 0 either way (the diagonal keeps every row's max finite),
    but inductor turned an in-place baddbmm onto -inf into NaN (torch 2.13)."""
    pos = torch.arange(seq_len, device=device)
    dist = (pos[:, None] - pos[None, :]).to(dtype)
    slopes = alibi_slopes(n_heads, dtype, device)
    return (-slopes[:, None, None] * dist).masked_fill(dist < 0, torch.finfo(dtype).min)


def cem_attention_core(
    kernel: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor | None,
    self_bias: torch.Tensor,
    alibi: torch.Tensor | None,  # causal_alibi(...); flex adds ALiBi itself and takes None
    scale: float,
    qe: torch.Tensor | None = None,
    ce: torch.Tensor | None = None,
) -> torch.Tensor:
    """o (B, K, J, dv) for q, k (B, K, J, d), v (B, K, J, dv); see the module docstring.

    v = None means v = k (CEM ties keys and values); it is passed as None rather than
    twice because torch.compile cannot trace one tensor given to two Function inputs.
    """
    if kernel == "blocked":
        return BlockedCausalAttention.apply(q, k, v, self_bias, alibi, scale, qe, ce, BLOCK_ROWS)
    if kernel == "sdpa":
        if qe is not None:
            raise ValueError("the sdpa kernel has no KQ-diagonal scores; use 'blocked'")
        return SDPAAlibiAttention.apply(q, k, v, self_bias, alibi, scale)
    if kernel == "flex":
        return flex_cem_attention(q, k, k if v is None else v, self_bias, alibi, scale, qe, ce)
    if kernel == "reference":
        return reference_attention(q, k, k if v is None else v, self_bias, alibi, scale, qe, ce)
    raise ValueError(f"unknown CEM attention kernel {kernel!r}; choose from {KERNELS}")


def reference_attention(q, k, v, self_bias, alibi, scale, qe=None, ce=None):
    """The explicit (B, K, J, J) math, differentiated by autograd."""
    j = q.shape[-2]
    s = (
        (q @ k.transpose(-1, -2)) * scale
        + alibi
        + self_bias[:, None, None] * torch.eye(j, dtype=q.dtype, device=q.device)
    )
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
    With v = None (tied keys and values, as in CEM) one gradient buffer serves both.
    """

    @staticmethod
    def forward(ctx, q, k, v, self_bias, alibi, scale, qe, ce, block_rows):
        b, heads, j, d = q.shape
        dv = d if v is None else v.shape[-1]
        dtype = q.dtype
        sdtype = torch.float32 if _low_precision(dtype) else dtype  # scores and probabilities
        ctx.tied = v is None
        ctx.input_dtypes = [t.dtype if t is not None else None for t in (k, v, qe, ce, self_bias)]
        q, k = q.contiguous(), k.to(dtype).contiguous()
        v = k if ctx.tied else v.to(dtype).contiguous()
        if qe is not None:  # matmuls in the input precision, sums in sdtype (as autocast would)
            qe, ce = qe.to(dtype).contiguous(), ce.to(dtype).contiguous()
        bounds = list(range(0, j, block_rows)) + [j]
        beta, alibi = self_bias.to(sdtype), alibi.to(sdtype)
        q3, k3, v3 = (t.view(b * heads, j, t.shape[-1]) for t in (q, k, v))
        outs, probs = [], []
        with torch.autocast(q.device.type, enabled=False):
            for r0, r1 in zip(bounds[:-1], bounds[1:]):
                rows = r1 - r0
                bias = _add_diagonal(alibi[:, r0:r1, :r1], beta, r0)  # (K, R, r1)
                if qe is None:
                    s = bias.expand(b, heads, rows, r1).contiguous()
                else:  # + e for these rows, (B, 1|K, R, r1)
                    s = _extra_scores(qe, ce, r0, r1).to(sdtype) + bias
                s3 = s.view(b * heads, rows, r1)
                qk = (q3[:, r0:r1], k3[:, :r1].transpose(1, 2))
                if sdtype == dtype:
                    s3.baddbmm_(*qk, alpha=scale)
                else:
                    s3.add_(torch.bmm(*qk), alpha=scale)
                p = torch.softmax(s3, dim=-1)
                outs.append(torch.bmm(p.to(dtype), v3[:, :r1]))
                probs.append(p)
        out = torch.cat(outs, dim=1).view(b, heads, j, dv)
        ctx.save_for_backward(q, k, v, out, qe, ce, *probs)
        ctx.bounds, ctx.scale = bounds, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, qe, ce, *probs = ctx.saved_tensors
        bounds, scale = ctx.bounds, ctx.scale
        b, heads, j, d = q.shape
        dv = v.shape[-1]
        dtype, sdtype = q.dtype, probs[0].dtype
        grad_out = grad_out.to(dtype).contiguous()
        q3, k3, v3 = (t.view(b * heads, j, t.shape[-1]) for t in (q, k, v))
        g3 = grad_out.view(b * heads, j, dv)
        # D_i = Σ_j p_ij dP_ij = dO_i · O_i, the softmax-backward row term
        row_term = (grad_out.to(sdtype) * out.to(sdtype)).sum(-1, keepdim=True).view(b * heads, j, 1)
        grad_q = torch.empty_like(q3)
        grad_k = grad_v = grad_qe = grad_ce = None  # k/v/ce sums over blocks are kept in sdtype
        grad_beta = torch.zeros(heads, dtype=sdtype, device=q.device)
        if qe is not None:
            grad_qe = torch.empty_like(qe)
        with torch.autocast(q.device.type, enabled=False):
            # last block first: it covers every key, so it initializes the key-side sums
            for (r0, r1), p in reversed(list(zip(zip(bounds[:-1], bounds[1:]), probs))):
                g = g3[:, r0:r1]
                ds = torch.bmm(g, v3[:, :r1].transpose(1, 2)).to(sdtype)
                ds.sub_(row_term[:, r0:r1]).mul_(p)  # dS = P ⊙ (dP - D)
                ds4 = ds.view(b, heads, r1 - r0, r1)
                grad_beta += torch.diagonal(ds4[..., r0:r1], dim1=-2, dim2=-1).sum((0, 2))
                if qe is not None:
                    grad_qe_rows, grad_ce_keys = _extra_scores_backward(ds4, qe, ce, r0, r1)
                    grad_qe[:, :, r0:r1] = grad_qe_rows
                    grad_ce = _accumulate(grad_ce, grad_ce_keys, r1)
                dv_keys = torch.bmm(p.to(dtype).transpose(1, 2), g)
                ds_scaled = ds.mul_(scale).to(dtype)  # q and k see the scores through `scale`
                grad_q[:, r0:r1] = torch.bmm(ds_scaled, k3[:, :r1])
                dk_keys = torch.bmm(ds_scaled.transpose(1, 2), q3[:, r0:r1])
                if ctx.tied:
                    grad_k = _accumulate(grad_k, dk_keys.to(sdtype).add_(dv_keys), r1)
                else:
                    grad_k = _accumulate(grad_k, dk_keys.to(sdtype), r1)
                    grad_v = _accumulate(grad_v, dv_keys.to(sdtype), r1)
        k_dtype, v_dtype, qe_dtype, ce_dtype, beta_dtype = ctx.input_dtypes
        grad_k = grad_k.view(b, heads, j, d).to(k_dtype)
        grad_v = None if ctx.tied else grad_v.view(b, heads, j, dv).to(v_dtype)
        if qe is not None:
            grad_qe, grad_ce = grad_qe.to(qe_dtype), grad_ce.to(ce_dtype)
        return (
            grad_q.view(b, heads, j, d),
            grad_k,
            grad_v,
            grad_beta.to(beta_dtype),
            None,
            None,
            grad_qe,
            grad_ce,
            None,
        )


def _accumulate(total: torch.Tensor | None, part: torch.Tensor, end: int) -> torch.Tensor:
    """total[:, :end] += part; the first part (the last block) spans every key and starts the sum."""
    if total is None:
        return part  # a fresh tensor from this block's matmul
    total[:, :end] += part
    return total


def _extra_scores(qe: torch.Tensor, ce: torch.Tensor, r0: int, r1: int) -> torch.Tensor:
    """e for query rows r0:r1 and keys :r1, (B, 1|K, R, r1): the KQ-diagonal scores."""
    if qe.shape[1] == 1:  # shared: one (B, R, r1) matrix for all heads
        return torch.bmm(qe[:, 0, r0:r1], ce[:, :r1].transpose(1, 2)).unsqueeze(1)
    return torch.matmul(qe[:, :, r0:r1], ce[:, None, :r1].transpose(-1, -2))


def _extra_scores_backward(ds4, qe, ce, r0, r1):
    """Gradients of e's inputs from dS (B, K, R, r1): (d qe rows, d ce keys)."""
    dtype = qe.dtype
    if qe.shape[1] == 1:
        ds_e = ds4.sum(1).to(dtype)  # (B, R, r1): e is added to every head
        return (
            torch.bmm(ds_e, ce[:, :r1]).unsqueeze(1),
            torch.bmm(ds_e.transpose(1, 2), qe[:, 0, r0:r1]).to(ds4.dtype),
        )
    ds_e = ds4.to(dtype)
    return (
        torch.matmul(ds_e, ce[:, None, :r1]),
        torch.matmul(ds_e.transpose(-1, -2), qe[:, :, r0:r1]).sum(1).to(ds4.dtype),
    )


def _add_diagonal(bias: torch.Tensor, beta: torch.Tensor, r0: int) -> torch.Tensor:
    """bias (K, R, C) + beta_k on the entries (i, i + r0): the self-token bias of a block."""
    i = torch.arange(r0, r0 + bias.shape[1], device=bias.device)
    j = torch.arange(bias.shape[2], device=bias.device)
    return torch.where(i[:, None] == j[None, :], bias + beta[:, None, None], bias)


class SDPAAlibiAttention(torch.autograd.Function):
    """PyTorch's SDPA kernels with the constant ALiBi + beta mask (no KQ diagonal): the
    CPU flash kernel on CPU, the memory-efficient (CUTLASS) kernel on CUDA, the only
    CUDA SDPA kernel that takes a float mask and returns the logsumexp.

    The mask is built from a detached beta so the fused kernel is used; the exact beta
    gradient is Σ_i dS_iik = Σ_i p_iik (dO_i · v_i - dO_i · O_i), with the diagonal
    probability p_iik = exp(s_iik - logsumexp_i) recovered from the kernel's logsumexp.
    The mask has q's dtype (both kernels require it): in bf16 an ALiBi bias -m (i - j)
    is rounded to 8 significant bits, as with any bf16 mask given to SDPA.
    """

    @staticmethod
    def forward(ctx, q, k, v, self_bias, alibi, scale):
        ctx.tied = v is None
        v = k if v is None else v
        k, v = k.to(q.dtype), v.to(q.dtype)
        mask = _add_diagonal(alibi.to(q.dtype), self_bias.detach().to(q.dtype), 0).unsqueeze(0)
        if q.is_cuda:
            out, lse, extra = _efficient_forward(q, k, v, mask, scale)
        else:
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q, k, v, 0.0, False, attn_mask=mask, scale=scale
            )
            extra = ()
        ctx.save_for_backward(q, k, v, out, lse, mask, self_bias, *extra)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, mask, self_bias, *extra = ctx.saved_tensors
        grad_out = grad_out.to(q.dtype).contiguous()
        if q.is_cuda:
            grad_q, grad_k, grad_v = _efficient_backward(grad_out, q, k, v, out, lse, mask, extra, ctx.scale)
        else:
            grad_q, grad_k, grad_v = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                grad_out, q, k, v, out, lse, 0.0, False, attn_mask=mask, scale=ctx.scale
            )
        sdtype = torch.float32 if _low_precision(q.dtype) else q.dtype
        s_diag = ctx.scale * (q * k).sum(-1, dtype=sdtype) + self_bias.to(sdtype)[:, None]  # ALiBi is 0 on i = j
        p_diag = torch.exp(s_diag - lse.to(sdtype))
        ds_diag = p_diag * ((grad_out * v).sum(-1, dtype=sdtype) - (grad_out * out).sum(-1, dtype=sdtype))
        if ctx.tied:
            grad_k, grad_v = grad_k + grad_v, None
        return grad_q, grad_k, grad_v, ds_diag.sum((0, 2)).to(self_bias.dtype), None, None


# CUDA memory-efficient SDPA (CUTLASS) input rules, as F.scaled_dot_product_attention
# applies them before calling the kernel: head dims a multiple of 16 bytes' worth of
# elements, the mask's rows 16-element aligned; its logsumexp rows are padded to 32.
_MEM_EFF_BIAS_ALIGNMENT = 16


def _pad_last(t: torch.Tensor, multiple: int) -> torch.Tensor:
    pad = -t.shape[-1] % multiple
    return torch.nn.functional.pad(t, (0, pad)) if pad else t


def _efficient_forward(q, k, v, mask, scale):
    b, heads, j, d = q.shape
    align = 16 // q.element_size()  # zero columns change neither q·k (scale is explicit) nor the kept outputs
    qp, kp, vp = (_pad_last(t, align) for t in (q, k, v))
    bias = _pad_last(mask, _MEM_EFF_BIAS_ALIGNMENT)[..., :j].expand(b, heads, j, j)
    out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(
        qp, kp, vp, bias, True, 0.0, False, scale=scale
    )
    return out[..., : v.shape[-1]], lse[..., :j], (out, lse, seed, offset)


def _efficient_backward(grad_out, q, k, v, out, lse, mask, extra, scale):
    out_padded, lse_padded, seed, offset = extra
    b, heads, j, d = q.shape
    align = 16 // q.element_size()
    qp, kp, vp = (_pad_last(t, align) for t in (q, k, v))
    bias = _pad_last(mask, _MEM_EFF_BIAS_ALIGNMENT)[..., :j].expand(b, heads, j, j)
    grad_q, grad_k, grad_v, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        _pad_last(grad_out, align).contiguous(),
        qp,
        kp,
        vp,
        bias,
        out_padded,
        lse_padded,
        seed,
        offset,
        0.0,
        [True, True, True, False],
        False,
        scale=scale,
    )
    return grad_q[..., :d], grad_k[..., :d], grad_v[..., : v.shape[-1]]


def flex_cem_attention(q, k, v, self_bias, alibi, scale, qe=None, ce=None):
    """FlexAttention (GPU training; CPU forward only): ALiBi, beta and e in a score_mod.

    e reaches the kernel as a captured (B, 1|K, J, J) tensor in the score precision
    that FlexAttention differentiates itself (a dense read, scattered back per score).
    beta goes in detached, and its exact gradient is added outside the kernel from
    the diagonal probabilities p_iik = exp(s_iik - logsumexp_i) (`_SelfBiasGradient`):
    as a captured buffer, beta[h] made the backward kernel scatter every one of the
    B·K·J²/2 scores into K addresses, and an 86M CEM attention step took seconds
    (H100, torch 2.11).
    """
    heads, j = q.shape[1], q.shape[2]
    k, v = k.to(q.dtype), v.to(q.dtype)  # autocast may leave c-derived values in float32
    sdtype = torch.float32 if _low_precision(q.dtype) else q.dtype
    slopes = alibi_slopes(heads, sdtype, q.device)  # on the device: no host copy (a sync) per call
    beta = self_bias.to(sdtype)
    e = None if qe is None else torch.matmul(qe, ce.unsqueeze(1).transpose(-1, -2)).to(sdtype)  # (B, 1|K, J, J)
    attend = _flex_with_bias
    if q.is_cuda and not torch.compiler.is_compiling():
        attend = _compiled_flex()  # eager flex materializes the scores; inside a compiled graph inductor fuses it
    out, lse = attend(q, k, v, slopes, beta.detach(), e, _causal_block_mask(j, q.device), scale)
    if not (torch.is_grad_enabled() and self_bias.requires_grad):
        return out
    with torch.no_grad():  # s_iik as the kernel scored it (ALiBi is 0 on the diagonal)
        s_diag = scale * (q * k).sum(-1, dtype=sdtype) + beta[:, None]
        if qe is not None:
            s_diag = s_diag + (qe * ce.unsqueeze(1)).sum(-1, dtype=sdtype)
    return _SelfBiasGradient.apply(out, s_diag, lse.detach(), v.detach(), beta)


class _SelfBiasGradient(torch.autograd.Function):
    """Identity on the attention output whose backward adds the exact self-bias gradient
    dL/dbeta_k = Σ_{b,i} p_iik (dO_i · v_i - dO_i · O_i) (the diagonal of dS)."""

    @staticmethod
    def forward(ctx, out, s_diag, lse, v, beta):
        ctx.save_for_backward(out.detach(), s_diag, lse, v)
        return out.clone()

    @staticmethod
    def backward(ctx, grad_out):
        out, s_diag, lse, v = ctx.saved_tensors
        sdtype = s_diag.dtype
        p_diag = torch.exp(s_diag - lse.to(sdtype))
        ds_diag = p_diag * ((grad_out * v).sum(-1, dtype=sdtype) - (grad_out * out).sum(-1, dtype=sdtype))
        return grad_out, None, None, None, ds_diag.sum((0, 2))


def _flex_with_bias(q, k, v, slopes, beta, e, block_mask, scale):
    """flex_attention with s + ALiBi + beta [i = j] + e, returning (out, logsumexp).
    The bias tensors are arguments, not closure cells of the caller: compiled, this
    function is then guarded on their shapes and dtypes only, so every layer shares one
    compiled kernel (closures over each layer's parameters recompiled it per layer,
    and past dynamo's recompile limit of 8 the rest ran as eager flex, which
    materializes the scores)."""
    from torch.nn.attention.flex_attention import flex_attention

    e_per_head = e is not None and e.shape[1] > 1

    def score_mod(score, b, h, q_idx, kv_idx):
        score = score + slopes[h] * (kv_idx - q_idx) + torch.where(q_idx == kv_idx, beta[h], 0.0)
        if e is not None:
            score = score + e[b, h if e_per_head else 0, q_idx, kv_idx]
        return score

    if _AUX_REQUEST is not None:
        out, aux = flex_attention(
            q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, return_aux=_AUX_REQUEST(lse=True)
        )
        return out, aux.lse
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, return_lse=True)


def _aux_request():
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:  # torch < 2.9: return_lse=True
        return None
    return AuxRequest


_AUX_REQUEST = _aux_request() if FLEX_AVAILABLE else None


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


_BLOCK_MASKS: dict[tuple[int, str], object] = {}


def _causal_block_mask(seq_len: int, device: torch.device):
    """The causal BlockMask of a length, built once per (length, device) outside compiled
    graphs (building it costs a (J, J) pass); traced afresh inside them."""
    from torch.nn.attention.flex_attention import create_block_mask

    if torch.compiler.is_compiling():
        return create_block_mask(_causal, B=None, H=None, Q_LEN=seq_len, KV_LEN=seq_len, device=device)
    key = (seq_len, str(device))
    if key not in _BLOCK_MASKS:
        _BLOCK_MASKS[key] = create_block_mask(_causal, B=None, H=None, Q_LEN=seq_len, KV_LEN=seq_len, device=device)
    return _BLOCK_MASKS[key]


@functools.cache
def _compiled_flex():
    return torch.compile(_flex_with_bias, dynamic=False)
