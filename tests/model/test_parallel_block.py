"""The Energy Transformer block, `block: parallel` (docs/design/energy-lens.md#s11-3-energy-transformer-block), against float64 references.

The reference computes each sublayer's descent direction from docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s4-preconditioners and docs/design/energy-lens.md#s11-3-energy-transformer-block
(tests/components/reference_cem.py: explicit scores, dense preconditioners, reading
parameters by their docs/design/contract.md#s10-public-contract names), never through the components' step methods, and
runs the joint step x^{t+1} = x^t + eta_att Delta_att(u^t) + eta_mlp Delta_mlp(u^t) itself.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from cem_ablate import build_model
from cem_ablate.config import ConfigError
from cem_ablate.model import model_report
from tests.components.reference_cem import attention_energy, attention_scores, dense_preconditioner, rms_norm

DIMS = {"d_model": 24, "n_layers": 2, "n_heads": 3, "d_mlp": 40, "vocab_size": 31}
ATTENTION = {
    "name": "cem",
    "kq_diag": "shared",
    "preconditioner": {"name": "diag_lowrank", "rank": 2},
    "step_size": 0.7,
}
HOPFIELD = {"name": "hopfield", "preconditioner": "diag", "step_size": 1.3}


def parallel_model(attention: dict, mlp: dict, steps: int, seed: int = 0, randomize: bool = True, **options):
    torch.manual_seed(seed)
    cfg = {
        **DIMS,
        "block": "parallel",
        **options,
        "attention": {**attention, "steps": steps},
        "mlp": {**mlp, "steps": steps},
    }
    model = build_model(cfg).double()
    if randomize:  # every parameter off its init (KQ diagonal, self bias, low-rank V are 0 at init)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.uniform_(0.5, 1.5)
                elif name.endswith("stream_logit"):
                    p.normal_(0.0, 1.0)
                elif p.dim() == 1 or "kq_diag" in name or "precond" in name or "self_bias" in name:
                    p.normal_(0.0, 0.3)
                else:
                    p.normal_(0.0, 0.2)
    return model


def ids(seed=0, batch=2, seq=7):
    return torch.randint(0, DIMS["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(seed))


# -- the reference: docs/design/layers.md#s2-cem-attention (attention), docs/design/layers.md#s3-cem-mlp (CEM MLP), docs/design/energy-lens.md#s11-3-energy-transformer-block (hopfield, joint step) --
def attention_delta(layer, u, c, step_size, diag_update="paper"):
    """eta Σ_k P_k W_Q^kT o_k(u) (+ Σ_k P_k (delta_k ⊙ Σ_j p_ijk c_j) when exact), docs/design/layers.md#s2-cem-attention."""
    D = u.shape[-1]
    K = layer.n_heads
    d = D // K
    Wq, Wk = layer.w_q.weight.view(K, d, D), layer.w_k.weight.view(K, d, D)
    p = torch.softmax(attention_scores(layer, u, c), dim=-1)
    delta = getattr(layer, "kq_diag", None)
    total = torch.zeros_like(u)
    for k in range(K):
        g = (p[:, k] @ (c @ Wk[k].T)) @ Wq[k]
        if delta is not None and diag_update == "exact":
            g = g + (delta if delta.dim() == 1 else delta[k]) * (p[:, k] @ c)
        total = total + g @ dense_preconditioner(layer.precond, D, k).T
    return step_size * total


def hopfield_delta(layer, u, c, step_size):
    """eta P Xi^T ReLU(Xi u) (docs/design/energy-lens.md#s11-3-energy-transformer-block)."""
    xi = layer.xi.weight
    return step_size * (F.relu(u @ xi.T) @ xi) @ dense_preconditioner(layer.precond, u.shape[-1]).T


def cem_mlp_delta(layer, u, c, step_size):
    """eta P V^T (gamma ⊙ SiLU(V u)), gamma = W c (docs/design/layers.md#s3-cem-mlp)."""
    gamma = c @ layer.w.weight.T
    return (
        step_size
        * ((gamma * F.silu(u @ layer.v.weight.T)) @ layer.v.weight)
        @ dense_preconditioner(layer.precond, u.shape[-1]).T
    )


MLP_DELTAS = {"hopfield": hopfield_delta, "cem": cem_mlp_delta}


def reference_block(block, h, steps, att_eta, mlp_name, mlp_eta, diag_update="paper"):
    """x^0 = h; u^t = c at t = 0 else RMSNorm(x^t) with the attention's norm; T joint steps."""
    gain = block.attention.norm.weight
    c = rms_norm(h, gain)
    x = h
    for t in range(steps):
        u = c if t == 0 else rms_norm(x, gain)
        x = (
            x
            + attention_delta(block.attention, u, c, att_eta, diag_update)
            + MLP_DELTAS[mlp_name](block.mlp, u, c, mlp_eta)
        )
    return x


def reference_logits(model, input_ids, steps, att_eta, mlp_name, mlp_eta, diag_update="paper"):
    h = model.embed_tokens.weight[input_ids]
    for block in model.blocks:
        h = reference_block(block, h, steps, att_eta, mlp_name, mlp_eta, diag_update)
    return rms_norm(h, model.norm.weight) @ model.lm_head.weight.T


def value_and_grads(fn, model):
    logits = fn()
    loss = (logits * torch.linspace(-1, 1, logits.shape[-1], dtype=logits.dtype)).square().mean()
    return logits.detach(), torch.autograd.grad(loss, list(model.parameters()))


def assert_agree(model, fn, ref_fn):
    out, grads = value_and_grads(fn, model)
    ref_out, ref_grads = value_and_grads(ref_fn, model)
    assert (out - ref_out).abs().max() <= 1e-9
    for (name, _), g, r in zip(model.named_parameters(), grads, ref_grads):
        assert (g - r).abs().max() <= 1e-9 * max(1.0, r.abs().max().item()), name
    return out


CASES = [  # (attention options, mlp options, mlp name in MLP_DELTAS, diag_update)
    (ATTENTION, HOPFIELD, "hopfield", "paper"),
    (
        {**ATTENTION, "impl": "reference", "kq_diag": "per_head", "diag_update": "exact"},
        {**HOPFIELD, "impl": "reference"},
        "hopfield",
        "exact",
    ),
    (
        {**ATTENTION, "kq_diag": "none", "preconditioner": "identity", "step_size": 1.0},
        {"name": "cem", "preconditioner": {"name": "diag_lowrank", "rank": 3}},
        "cem",
        "paper",
    ),
]


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("attention,mlp,mlp_name,diag_update", CASES)
def test_joint_step_matches_the_reference_in_outputs_and_gradients(attention, mlp, mlp_name, diag_update, steps):
    model = parallel_model(attention, mlp, steps)
    batch = ids()
    att_eta, mlp_eta = attention.get("step_size", 1.0), mlp.get("step_size", 1.0)
    out = assert_agree(
        model,
        lambda: model(batch),
        lambda: reference_logits(model, batch, steps, att_eta, mlp_name, mlp_eta, diag_update),
    )
    sequential = build_model(
        {**DIMS, "attention": {**attention, "steps": steps}, "mlp": {**mlp, "steps": steps}}
    ).double()
    sequential.load_state_dict(model.state_dict(), strict=False)  # all but the MLP norms
    assert (sequential(batch) - out).abs().max() > 1e-6  # the joint step is another function


def test_llama_parallel_block_is_the_palm_block():
    """Llama sublayers at T = 1: x + Attn(c) + MLP(c) with the shared norm c = RMSNorm(h)."""
    model = parallel_model({"name": "llama"}, {"name": "llama"}, steps=1)
    block = model.blocks[0]
    att, mlp = block.attention, block.mlp
    h = torch.randn(2, 7, DIMS["d_model"], dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    c = rms_norm(h, att.norm.weight)

    def palm(h):  # Llama attention and SwiGLU written out from docs/design/layers.md#s1-llama-baseline, both reading c
        b, j, d = c.shape
        heads, hd = att.n_heads, d // att.n_heads

        def split(x):
            return x.view(b, j, heads, hd).transpose(1, 2)

        cos, sin = att.rope(j, c.dtype, c.device)
        q = att.rope.apply(split(att.q_proj(c)), cos, sin)
        k = att.rope.apply(split(att.k_proj(c)), cos, sin)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(torch.ones(j, j, dtype=torch.bool).triu(1), float("-inf"))
        o = (torch.softmax(scores, -1) @ split(att.v_proj(c))).transpose(1, 2).reshape(b, j, d)
        return h + att.o_proj(o) + mlp.down_proj(F.silu(mlp.gate_proj(c)) * mlp.up_proj(c))

    assert (block(h) - palm(h)).abs().max() <= 1e-12
    assert not hasattr(mlp, "norm")


def test_the_mlp_norm_is_gone_from_parameters_and_counts():
    parallel = parallel_model(ATTENTION, HOPFIELD, steps=2, randomize=False)
    sequential = build_model({**DIMS, "attention": {**ATTENTION, "steps": 2}, "mlp": {**HOPFIELD, "steps": 2}})
    names = set(dict(parallel.named_parameters()))
    assert not any(".mlp.norm" in n for n in names)
    assert names | {f"blocks.{i}.mlp.norm.weight" for i in range(2)} == set(dict(sequential.named_parameters()))
    n = sum(p.numel() for p in parallel.parameters())
    assert n == sum(p.numel() for p in sequential.parameters()) - DIMS["n_layers"] * DIMS["d_model"]
    report = model_report(parallel, seq_len=16)
    assert report.params_total == n
    assert report.params_by_component["norms"] == DIMS["n_layers"] * DIMS["d_model"] + DIMS["d_model"]
    # FLOPs: both sublayers' T steps, as in the sequential model (norms are not counted)
    assert report.flops_per_token == model_report(sequential, seq_len=16).flops_per_token


def test_energy_trace_is_the_sum_of_both_energies_at_each_query_state():
    steps = 3
    model = parallel_model({**ATTENTION, "step_size": 0.05}, {**HOPFIELD, "step_size": 0.05}, steps)
    model.set_energy_tracking(True)
    batch = ids()
    model(batch)
    trace = model.energy_trace()
    assert sorted(trace) == sorted(f"blocks.{i}/step{t}" for i in range(2) for t in range(steps + 1))
    block = model.blocks[0]
    h = model.embed_tokens.weight[batch]
    c = rms_norm(h, block.attention.norm.weight)
    x = h
    with torch.no_grad():
        for t in range(steps + 1):
            u = c if t == 0 else rms_norm(x, block.attention.norm.weight)
            expected = (
                (attention_energy(block.attention, u, h) - 0.5 * F.relu(u @ block.mlp.xi.weight.T).square().sum((1, 2)))
                .mean()
                .item()
            )
            assert abs(trace[f"blocks.0/step{t}"] - expected) <= 1e-9 * max(1.0, abs(expected))
            x = x + attention_delta(block.attention, u, c, 0.05) + hopfield_delta(block.mlp, u, c, 0.05)
    assert trace["blocks.0/step1"] < trace["blocks.0/step0"]  # small steps descend the joint energy
    model.set_energy_tracking(False)
    model(batch)
    assert model.energy_trace() == {}


def test_llama_parallel_block_records_no_energy():
    model = parallel_model({"name": "llama"}, {"name": "llama"}, steps=1)
    model.set_energy_tracking(True)
    model(ids())
    assert model.energy_trace() == {}


@pytest.mark.parametrize("stream", ["heavy_ball", "nesterov"])
def test_a_velocity_stream_sees_the_parallel_block_as_one_sublayer(stream):
    """Under a stream the joint step f (x^T = f(h)) is one sublayer l: stream_logit (1,)."""
    model = parallel_model(ATTENTION, HOPFIELD, steps=2, stream=stream, velocity_norm="rms")
    assert model.blocks[0].stream_logit.shape == (1,) and len(model.blocks[0].velocity_norm) == 1
    batch = ids()

    def reference():
        x = model.embed_tokens.weight[batch]
        v = torch.zeros_like(x)
        for block in model.blocks:
            mu = torch.sigmoid(block.stream_logit[0])
            y = x + mu * v if stream == "nesterov" else x
            v = mu * v + (reference_block(block, y, 2, 0.7, "hopfield", 1.3) - y)
            v = rms_norm(v, block.velocity_norm[0].weight)
            x = x + v
        return rms_norm(x, model.norm.weight) @ model.lm_head.weight.T

    assert_agree(model, lambda: model(batch), reference)


def test_parallel_block_compiles_without_graph_breaks():
    torch._dynamo.reset()
    block = parallel_model(ATTENTION, HOPFIELD, steps=2).blocks[0].float()
    h = torch.randn(2, 10, DIMS["d_model"], generator=torch.Generator().manual_seed(3))
    eager = block(h)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")(
        h
    )  # why aot_eager: tests/components/test_compile.py
    assert (eager - compiled).abs().max() <= 1e-4


@pytest.mark.parametrize(
    "attention,mlp,path,fragment",
    [
        ({"name": "cem", "steps": 2}, {"name": "hopfield", "steps": 1}, "model.mlp.steps", "must be equal"),
        (
            {"name": "cem", "steps": 2, "update": "nesterov"},
            {"name": "hopfield", "steps": 2},
            "model.attention.update",
            "'gd'",
        ),
        (
            {"name": "cem", "steps": 2},
            {"name": "hopfield", "steps": 2, "update": "heavy_ball"},
            "model.mlp.update",
            "'gd'",
        ),
        (
            {"name": "cem", "steps": 2, "depth_mode": "reuse"},
            {"name": "hopfield", "steps": 2},
            "model.attention.depth_mode",
            "recursion",
        ),
        (
            {"name": "cem", "steps": 2, "recursion_state": "normalized"},
            {"name": "hopfield", "steps": 2},
            "model.attention.recursion_state",
            "x^0 = h",
        ),
        (
            {"name": "cem", "steps": 2},
            {"name": "cem", "steps": 2, "backprop_steps": 1},
            "model.mlp.backprop_steps",
            "every joint step",
        ),
    ],
)
def test_bad_parallel_configs_name_the_key(attention, mlp, path, fragment):
    with pytest.raises(ConfigError) as info:
        build_model({**DIMS, "block": "parallel", "attention": attention, "mlp": mlp})
    assert info.value.path == path
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_block_typo_and_a_component_without_the_joint_step(monkeypatch):
    with pytest.raises(ConfigError) as info:
        build_model({**DIMS, "block": "paralel"})
    assert info.value.path == "model.block" and "Did you mean 'parallel'?" in str(info.value)

    from cem_ablate import registry

    swiglu = registry.get("mlp", "llama").factory
    monkeypatch.delattr(swiglu, "step_context")  # a component without the joint step
    with pytest.raises(ConfigError) as info:
        build_model({**DIMS, "block": "parallel"})
    assert info.value.path == "model.mlp.name"
    assert "'llama'" in str(info.value) and "step_context" in str(info.value)
