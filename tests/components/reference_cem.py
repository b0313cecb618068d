"""An independent float64 implementation of docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s4-preconditioners, written for clarity, not speed.

Loops over heads, builds every preconditioner as a dense D x D matrix and evaluates
phi with scipy's dilogarithm. It reads parameters only through the public names of
docs/design/contract.md#s10-public-contract, so it checks the modules against the spec rather than against themselves.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy.special import spence


def rms_norm(x, weight, eps=1e-5):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def dense_preconditioner(precond, d_model, head=None):
    """P as a D x D matrix, or the identity when the module has no parameters."""
    if not hasattr(precond, "p"):
        return torch.eye(d_model, dtype=torch.float64)
    p = precond.p if head is None else precond.p[head]
    P = torch.diag(F.softplus(math.sqrt(d_model) * p))
    if hasattr(precond, "u"):
        U = precond.u if head is None else precond.u[head]
        V = precond.v if head is None else precond.v[head]
        P = P + U @ V.T + V @ U.T
    return P


def attention_scores(layer, x, c):
    """s[b, k, i, j] of docs/design/layers.md#s2-cem-attention with query state x and context c."""
    B, J, D = x.shape
    K = layer.n_heads
    d = D // K
    tau = math.sqrt(d)
    Wq = layer.w_q.weight.view(K, d, D)
    Wk = layer.w_k.weight.view(K, d, D)
    slopes = torch.tensor([2.0 ** (-8.0 * (k + 1) / K) for k in range(K)], dtype=x.dtype)
    s = torch.full((B, K, J, J), float("-inf"), dtype=x.dtype)
    delta = getattr(layer, "kq_diag", None)
    for k in range(K):
        q = x @ Wq[k].T
        key = c @ Wk[k].T
        dk = None if delta is None else (delta if delta.dim() == 1 else delta[k])
        for i in range(J):
            for j in range(i + 1):
                val = (key[:, j] * q[:, i]).sum(-1)
                if dk is not None:
                    val = val + (c[:, j] * dk * x[:, i]).sum(-1)
                bias = -slopes[k] * (i - j) + (layer.self_bias[k] if i == j else 0.0)
                s[:, k, i, j] = val / tau + bias
    return s


def attention_energy(layer, x, h):
    c = rms_norm(h, layer.norm.weight)
    d = x.shape[-1] // layer.n_heads
    s = attention_scores(layer, x, c)
    return -math.sqrt(d) * torch.logsumexp(s, dim=-1).sum(dim=(1, 2))


def recursion(h, gain, steps, update, recursion_state="raw", backprop_steps=None):
    """docs/design/layers.md#s2-cem-attention's recursion around a step x -> x + update(u), written out literally.

    raw: x0 = h, u = RMSNorm(x) every step (u0 = c); output x^T.
    normalized: x0 = c, u0 = c, u = RMSNorm(x) later; output h + (x^T - x0).
    backprop_steps k: the first T - k updates under torch.no_grad(), added as a constant.
    `update(u)` returns eta * P * (-grad E at u); `gain` is the RMSNorm gain.
    """
    k = steps if backprop_steps is None else backprop_steps
    c = rms_norm(h, gain)
    x0 = c if recursion_state == "normalized" else h
    x = x0
    with torch.no_grad():
        for t in range(steps - k):
            x = x + update(c if t == 0 else rms_norm(x, gain))
        constant = x - x0
    x = x0 + constant
    for t in range(steps - k, steps):
        x = x + update(c if t == 0 else rms_norm(x, gain))
    return h + (x - x0) if recursion_state == "normalized" else x


def attention_update(layer, h, diag_update="paper", step_size=1.0):
    """u -> eta Σ_k P_k (W_Q^kT o_k(u) [+ delta_k ⊙ Σ_j p_ijk c_j]) with context c = RMSNorm(h)."""
    B, J, D = h.shape
    K = layer.n_heads
    d = D // K
    Wq = layer.w_q.weight.view(K, d, D)
    Wk = layer.w_k.weight.view(K, d, D)
    c = rms_norm(h, layer.norm.weight)
    delta = getattr(layer, "kq_diag", None)

    def update(u):
        p = torch.softmax(attention_scores(layer, u, c), dim=-1)
        total = torch.zeros_like(u)
        for k in range(K):
            values = c @ Wk[k].T  # keys = values
            o = p[:, k] @ values  # (B, J, d)
            g = o @ Wq[k]  # W_Q^kT o
            if delta is not None and diag_update == "exact":
                dk = delta if delta.dim() == 1 else delta[k]
                g = g + dk * (p[:, k] @ c)
            total = total + g @ dense_preconditioner(layer.precond, D, k).T
        return step_size * total

    return update


def attention_forward(layer, h, steps, diag_update="paper", step_size=1.0, recursion_state="raw", backprop_steps=None):
    update = attention_update(layer, h, diag_update, step_size)
    return recursion(h, layer.norm.weight, steps, update, recursion_state, backprop_steps)


def silu_integral_closed_form(z: np.ndarray) -> np.ndarray:
    """phi(z) = z softplus(z) + Li2(-e^z) + pi^2/12, with Li2(y) = spence(1 - y)."""
    return z * np.logaddexp(0.0, z) + spence(1.0 + np.exp(z)) + np.pi**2 / 12


def mlp_energy(layer, x, h):
    c = rms_norm(h, layer.norm.weight)
    gamma = c @ layer.w.weight.T
    z = (x @ layer.v.weight.T).detach().numpy()
    phi = torch.from_numpy(silu_integral_closed_form(z))
    return -(gamma * phi).sum(dim=(1, 2))


def mlp_update(layer, h, step_size=1.0):
    """u -> eta P V^T (gamma ⊙ SiLU(V u)) with gamma = W RMSNorm(h)."""
    D = h.shape[-1]
    c = rms_norm(h, layer.norm.weight)
    gamma = c @ layer.w.weight.T
    P = dense_preconditioner(layer.precond, D)

    def update(u):
        g = (gamma * F.silu(u @ layer.v.weight.T)) @ layer.v.weight  # V^T(gamma ⊙ SiLU(V u))
        return step_size * g @ P.T

    return update


def mlp_forward(layer, h, steps, step_size=1.0, recursion_state="raw", backprop_steps=None):
    update = mlp_update(layer, h, step_size)
    return recursion(h, layer.norm.weight, steps, update, recursion_state, backprop_steps)
