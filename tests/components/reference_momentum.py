"""An independent float64 implementation of docs/design/energy-lens.md#s11-1-momentum (momentum over the recursion
steps) and of the docs/design/energy-lens.md#s11-3-energy-transformer-block Hopfield MLP, written out literally with plain loops.

The descent directions of CEM attention and the CEM MLP come from `reference_cem`
(docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s4-preconditioners with dense preconditioners); this module adds the (x, v) recursion and the
Hopfield energy and update. Parameters are read through their public names only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.components.reference_cem import dense_preconditioner, rms_norm


def momentum_recursion(
    h, gain, steps, update, method="gd", mu=0.0, recursion_state="raw", backprop_steps=None, query_states=None
):
    """docs/design/energy-lens.md#s11-1-momentum around `update(u)` = eta Delta(u):

        v^0 = 0;  y^t = x^t (gd, heavy_ball) or x^t + mu v^t (nesterov)
        u^t = c if t = 0 else RMSNorm(y^t);  v^{t+1} = mu v^t + update(u^t);  x^{t+1} = x^t + v^{t+1}

    gd is mu = 0. raw: x^0 = h, output x^T; normalized: x^0 = c, output h + (x^T - x^0).
    backprop_steps k: the first T - k steps run under torch.no_grad(), so their x and v are
    constants (x joins x^0 as a constant offset). `query_states`, a list, collects u^t.
    """
    k = steps if backprop_steps is None else backprop_steps
    if method == "gd":
        mu = 0.0
    c = rms_norm(h, gain)
    x0 = c if recursion_state == "normalized" else h
    x, v = x0, torch.zeros_like(x0)

    def step(x, v, t):
        y = x + mu * v if method == "nesterov" else x
        u = c if t == 0 else rms_norm(y, gain)
        if query_states is not None:
            query_states.append(u.detach())
        v = mu * v + update(u)
        return x + v, v

    with torch.no_grad():
        for t in range(steps - k):
            x, v = step(x, v, t)
        constant = x - x0
    x = x0 + constant
    for t in range(steps - k, steps):
        x, v = step(x, v, t)
    return h + (x - x0) if recursion_state == "normalized" else x


# -- the Hopfield MLP (docs/design/energy-lens.md#s11-3-energy-transformer-block) ---------------------------------------------------------------
def hopfield_energy(layer, x):
    """E(x) = -1/2 Σ_positions ||ReLU(Xi x)||^2, shape (B,)."""
    z = torch.clamp(x @ layer.xi.weight.T, min=0.0)
    return -0.5 * (z * z).sum(dim=(1, 2))


def hopfield_update(layer, step_size=1.0):
    """u -> eta P Xi^T ReLU(Xi u), with P dense."""
    xi = layer.xi.weight
    P = dense_preconditioner(layer.precond, xi.shape[1])

    def update(u):
        return step_size * (torch.clamp(u @ xi.T, min=0.0) @ xi) @ P.T

    return update


def momentum_of(layer):
    """mu of a sublayer: sigmoid(momentum_logit) if it learns it."""
    logit = getattr(layer, "momentum_logit", None)
    return torch.sigmoid(logit) if logit is not None else None


def relu_mlp(h, gain, xi):
    """h + Xi^T ReLU(Xi RMSNorm(h)): the tied-weight ReLU MLP that T = 1, P = I must equal."""
    return h + F.relu(rms_norm(h, gain) @ xi.T) @ xi
