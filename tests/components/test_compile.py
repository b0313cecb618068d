"""torch.compile handles every registered sublayer without graph breaks
(the bench's compiled mode and `train.compile` compile with `fullgraph=True`).

One compiled graph covers the whole zoo: blocks of several one-layer models
(every registered attention and MLP, the CEM options that change the code path,
plain reuse, per-step checkpointing, the normalized recursion state, truncated
backpropagation, whose no_grad steps must not break the graph, and docs/design/energy-lens.md#s11-1-momentum
momentum) are chained in one module and compiled with `fullgraph=True`, which raises
on any graph break. Compiled and eager forward outputs and gradients must agree in
float32 to 1e-4.

CI compiles the zoo with the `aot_eager` backend: TorchDynamo's whole-graph capture (the
graph-break check) and AOTAutograd's joint forward/backward trace and functionalization,
without Inductor's C++ code generation, which a clean CI machine does cold: measured on 2
cores beside a study, 11.8 s against 143 s (2026-11-26; the suite's slowest test at 207 s).
Inductor's lowering of these modules is the soak variant (`python -m pytest -m soak`); in
CI Inductor compiles the attention kernels alone (below) and a whole model in training
(tests/training/test_engine.py), and on a GPU the CUDA tests (tests/cuda).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import components.cem_attention_kernels as kernels
from cem_ablate import build_model, registry

DIMS = {"d_model": 32, "n_layers": 1, "n_heads": 4, "d_mlp": 48, "vocab_size": 50}

BLOCKS = [  # (attention, mlp) sub-configs; together they name every registered attention and MLP
    ({"name": "llama", "steps": 2, "depth_mode": "reuse"}, {"name": "llama"}),
    # docs/design/energy-lens.md#s11-1-momentum momentum (learnable mu, frozen steps: constant x and v) and the hopfield MLP
    (
        {
            "name": "cem",
            "kq_diag": "shared",
            "steps": 2,
            "preconditioner": {"name": "diag_lowrank", "rank": 2},
            "recursion_state": "normalized",
            "backprop_steps": 1,
            "update": "heavy_ball",
            "learnable_momentum": True,
        },
        {
            "name": "hopfield",
            "steps": 2,
            "preconditioner": {"name": "diag_lowrank", "rank": 3},
            "backprop_steps": 1,
            "update": "nesterov",
        },
    ),
    (
        {"name": "cem", "kq_diag": "per_head", "diag_update": "exact", "preconditioner": "diag"},
        {"name": "cem_param_matched", "preconditioner": "diag"},
    ),
    (
        {"name": "cem", "kq_diag": "none", "kernel": "sdpa", "steps": 2, "checkpoint_steps": True},
        {
            "name": "cem",
            "steps": 3,
            "checkpoint_steps": True,
            "learnable_step_size": True,
            "recursion_state": "normalized",
            "update": "nesterov",
        },
    ),  # per-step checkpoints of x and v
    (
        {"name": "cem", "steps": 2, "depth_mode": "reuse", "kq_diag": "none"},
        {"name": "cem", "steps": 2, "depth_mode": "reuse", "preconditioner": "identity"},
    ),
]


class Zoo(nn.Module):
    def __init__(self):
        super().__init__()
        blocks = []
        for i, (attention, mlp) in enumerate(BLOCKS):
            torch.manual_seed(i)
            block = build_model({**DIMS, "attention": attention, "mlp": mlp}).blocks[0]
            with torch.no_grad():  # move zero-initialized parts (KQ diagonal, self bias, V) off zero
                for name, p in block.named_parameters():
                    if "kq_diag" in name or "self_bias" in name or name.endswith("precond.v"):
                        p.normal_(0.0, 0.1)
            blocks.append(block)
        self.blocks = nn.ModuleList(blocks)

    def forward(self, h):
        for block in self.blocks:
            h = block(h)
        return h


def test_the_zoo_covers_every_registered_sublayer():
    names = {(kind, sub["name"]) for pair in BLOCKS for kind, sub in zip(("attention", "mlp"), pair)}
    for kind in ("attention", "mlp"):  # the built-in zoo: tests elsewhere register test-only components
        builtin = {
            s.name
            for s in registry.all_specs()
            if s.kind == kind and getattr(s.factory, "__module__", "").startswith("components.")
        }
        assert {n for k, n in names if k == kind} == builtin


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.soak)])
def test_every_variant_compiles_without_graph_breaks_and_matches_eager(monkeypatch, backend):
    monkeypatch.setattr(kernels, "BLOCK_ROWS", 8)  # several query blocks at J = 20
    torch._dynamo.reset()
    zoo = Zoo()
    h = torch.randn(2, 20, DIMS["d_model"], generator=torch.Generator().manual_seed(0))

    def run(fn):
        x = h.clone().requires_grad_(True)
        out = fn(x)
        grads = torch.autograd.grad(out.square().mean(), [x, *zoo.parameters()])
        return out.detach(), grads

    eager_out, eager_grads = run(zoo)
    compiled_out, compiled_grads = run(torch.compile(zoo, fullgraph=True, backend=backend))  # raises on a graph break
    assert (compiled_out - eager_out).abs().max() <= 1e-4
    names = ["input"] + [n for n, _ in zoo.named_parameters()]
    for name, a, b in zip(names, compiled_grads, eager_grads):
        assert (a - b).abs().max() <= 1e-4 * max(1.0, b.abs().max().item()), name


@pytest.mark.parametrize("kernel", ["blocked", "sdpa"])
def test_kernels_compile_alone(kernel):
    """The attention kernels themselves trace as one graph (custom autograd.Functions)."""
    torch._dynamo.reset()
    q, k = (torch.randn(1, 2, 9, 4, requires_grad=True) for _ in range(2))
    beta = torch.randn(2, requires_grad=True)
    alibi = kernels.causal_alibi(2, 9, torch.float32, torch.device("cpu"))

    def core(q, k, beta):
        return kernels.cem_attention_core(kernel, q, k, None, beta, alibi, 0.5)  # None: values = keys

    eager = core(q, k, beta)
    compiled = torch.compile(core, fullgraph=True)(q, k, beta)
    assert (eager - compiled).abs().max() <= 1e-5
    g_eager = torch.autograd.grad(eager.sum(), [q, k, beta])
    g_compiled = torch.autograd.grad(compiled.sum(), [q, k, beta])
    assert all((a - b).abs().max() <= 1e-5 for a, b in zip(g_eager, g_compiled))
