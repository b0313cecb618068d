"""The velocity stream across depth (docs/design/energy-lens.md#s11-2-velocity-stream), against a plain float64 reference.

The reference below is written from docs/design/energy-lens.md#s11-2-velocity-stream's formulas, one sublayer application at
a time: it uses the model's sublayers only as the maps f (any sublayer, Llama or CEM
with its own recursion) and its own RMSNorm formula for the velocity norm.
"""

from __future__ import annotations

import pytest
import torch

from cem_ablate import build_model
from cem_ablate.config import ConfigError
from cem_ablate.model import model_report

DIMS = {"d_model": 24, "n_layers": 2, "n_heads": 3, "d_mlp": 40, "vocab_size": 31}
SUBLAYERS = {
    "llama": {"attention": {"name": "llama"}, "mlp": {"name": "llama"}},
    "cem_T2": {
        "attention": {"name": "cem", "steps": 2, "kq_diag": "shared", "preconditioner": "diag"},
        "mlp": {"name": "cem", "steps": 2},
    },
    "reuse": {
        "attention": {"name": "cem", "steps": 2, "depth_mode": "reuse"},
        "mlp": {"name": "llama", "steps": 2, "depth_mode": "reuse"},
    },
}


def stream_model(sublayers: str, seed: int = 0, randomize: bool = True, **options):
    torch.manual_seed(seed)
    model = build_model({**DIMS, **SUBLAYERS[sublayers], **options}).double()
    if randomize:  # move zero/one-initialized parts off their init, so every parameter matters
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight") or ".velocity_norm." in name:
                    p.uniform_(0.5, 1.5)
                elif name.endswith("stream_logit"):
                    p.normal_(0.0, 1.0)
                elif p.dim() == 1 or "kq_diag" in name or "precond" in name:
                    p.normal_(0.0, 0.3)
    return model


def ids(seed=0, batch=2, seq=9):
    return torch.randint(0, DIMS["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(seed))


def rms_norm(x, gain, eps):
    return gain * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def reference_logits(model, input_ids, stream: str):
    """docs/design/energy-lens.md#s11-2-velocity-stream: state (x, v), v = 0 after the embedding; per sublayer application l
    (attention then MLP, `repeats` times each), mu_l = sigmoid(a_l)."""
    x = model.embed_tokens.weight[input_ids]
    v = torch.zeros_like(x)
    for block in model.blocks:
        mu = 1.0 / (1.0 + torch.exp(-block.stream_logit))
        applications = [(0, block.attention)] * block.attention_repeats + [(1, block.mlp)] * block.mlp_repeats
        for index, f in applications:
            if stream == "heavy_ball":
                v = mu[index] * v + (f(x) - x)
            else:  # nesterov: evaluate at the look-ahead y = x + mu v
                y = x + mu[index] * v
                v = mu[index] * v + (f(y) - y)
            norms = getattr(block, "velocity_norm", None)
            if norms is not None:
                v = rms_norm(v, norms[index].weight, norms[index].eps)
            x = x + v
    final = rms_norm(x, model.norm.weight, model.norm.eps)
    return final @ model.lm_head.weight.T


def value_and_grads(fn, model):
    logits = fn()
    loss = (logits * torch.linspace(-1, 1, logits.shape[-1], dtype=logits.dtype)).square().mean()
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    return logits.detach(), grads


@pytest.mark.parametrize("sublayers", list(SUBLAYERS))
@pytest.mark.parametrize("stream", ["heavy_ball", "nesterov"])
@pytest.mark.parametrize("velocity_norm", ["none", "rms"])
def test_stream_matches_the_reference_in_outputs_and_gradients(sublayers, stream, velocity_norm):
    model = stream_model(sublayers, stream=stream, velocity_norm=velocity_norm)
    batch = ids()
    out, grads = value_and_grads(lambda: model(batch), model)
    ref_out, ref_grads = value_and_grads(lambda: reference_logits(model, batch, stream), model)
    assert (out - ref_out).abs().max() <= 1e-9
    for (name, _), g, r in zip(model.named_parameters(), grads, ref_grads):
        assert g is not None and r is not None, name
        assert (g - r).abs().max() <= 1e-9 * max(1.0, r.abs().max().item()), name
    # the stream really moved something: it differs from the residual model with the same weights
    residual = stream_model(sublayers, randomize=False)
    residual.load_state_dict(
        {k: v for k, v in model.state_dict().items() if "stream_logit" not in k and "velocity_norm" not in k}
    )
    assert (residual(batch) - out).abs().max() > 1e-6


def test_stream_logit_gets_a_gradient_and_starts_at_stream_momentum():
    model = stream_model("llama", randomize=False, stream="nesterov", stream_momentum=0.3)
    block = model.blocks[0]
    assert block.stream_logit.shape == (2,)
    assert torch.allclose(torch.sigmoid(block.stream_logit), torch.full((2,), 0.3, dtype=torch.float64))
    model(ids()).square().mean().backward()
    assert all(b.stream_logit.grad.abs().min() > 0 for b in model.blocks[1:])  # block 0 sees v = 0 at l = 0


@pytest.mark.parametrize("sublayers", list(SUBLAYERS))
def test_residual_stream_is_todays_model_bit_for_bit(sublayers):
    today = stream_model(sublayers, randomize=False)
    explicit = stream_model(sublayers, randomize=False, stream="residual", velocity_norm="rms", stream_momentum=0.9)
    assert list(today.state_dict()) == list(explicit.state_dict())
    assert not any("stream" in k or "velocity" in k for k in today.state_dict())
    for a, b in zip(today.parameters(), explicit.parameters()):
        assert torch.equal(a, b)
    batch = ids()
    assert torch.equal(today(batch), explicit(batch))


@pytest.mark.parametrize("stream", ["heavy_ball", "nesterov"])
def test_vanishing_momentum_equals_the_residual_stream(stream):
    """docs/design/energy-lens.md#s11-2-velocity-stream: with all mu = 0 and no velocity norm every stream equals residual
    (mu = sigmoid(-40) ~ 4e-18)."""
    model = stream_model("cem_T2", stream=stream)
    with torch.no_grad():
        for block in model.blocks:
            block.stream_logit.fill_(-40.0)
    residual = stream_model("cem_T2", randomize=False)
    residual.load_state_dict({k: v for k, v in model.state_dict().items() if "stream_logit" not in k})
    batch = ids()
    assert (model(batch) - residual(batch)).abs().max() <= 1e-12


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("sublayers", ["llama", "reuse"])
def test_parameter_counts_and_names(sublayers):
    base = n_params(stream_model(sublayers, randomize=False))
    d, layers = DIMS["d_model"], DIMS["n_layers"]
    plain = stream_model(sublayers, randomize=False, stream="heavy_ball")
    normed = stream_model(sublayers, randomize=False, stream="nesterov", velocity_norm="rms")
    assert n_params(plain) == base + 2 * layers
    assert n_params(normed) == base + 2 * layers + 2 * d * layers
    names = dict(normed.named_parameters())
    assert names["blocks.1.stream_logit"].shape == (2,)
    assert names["blocks.0.velocity_norm.1.weight"].shape == (d,)
    assert len(normed.blocks[0].velocity_norm) == 2
    report = model_report(normed, seq_len=16)
    assert report.params_total == n_params(normed)


def test_report_counts_the_stream_flops():
    residual = model_report(stream_model("reuse", randomize=False), seq_len=16)
    nesterov = model_report(stream_model("reuse", randomize=False, stream="nesterov", velocity_norm="rms"), seq_len=16)
    d, applications = DIMS["d_model"], 4  # attention and MLP applied twice each (reuse)
    per_block = applications * (5 * d + 4 * d)
    assert nesterov.flops_by_module["blocks.0.stream"] == per_block
    assert nesterov.flops_per_token - residual.flops_per_token == DIMS["n_layers"] * per_block
    assert "blocks.0.stream" not in residual.flops_by_module


def test_stream_block_compiles_without_graph_breaks():
    torch._dynamo.reset()
    block = stream_model("cem_T2", stream="nesterov", velocity_norm="rms").blocks[1].float()
    g = torch.Generator().manual_seed(3)
    x, v = (torch.randn(2, 10, DIMS["d_model"], generator=g) for _ in range(2))
    eager_x, eager_v = block(x, v)
    compiled_x, compiled_v = torch.compile(block, fullgraph=True, backend="aot_eager")(x, v)  # as test_compile.py
    assert (eager_x - compiled_x).abs().max() <= 1e-4 and (eager_v - compiled_v).abs().max() <= 1e-4


@pytest.mark.parametrize(
    "options,path,fragment",
    [
        ({"stream": "nesterow"}, "model.stream", "Did you mean 'nesterov'?"),
        ({"stream": "momentum"}, "model.stream", "heavy_ball"),
        ({"velocity_norm": "rsm"}, "model.velocity_norm", "Did you mean 'rms'?"),
        ({"stream": "nesterov", "stream_momentum": 1.0}, "model.stream_momentum", "(0, 1)"),
        ({"stream": "heavy_ball", "stream_momentum": 0.0}, "model.stream_momentum", "stream: residual"),
        ({"stream_momentun": 0.5}, "model.stream_momentun", "Did you mean 'stream_momentum'"),
    ],
)
def test_bad_stream_options_name_the_key(options, path, fragment):
    with pytest.raises(ConfigError) as info:
        build_model({**DIMS, **options})
    assert info.value.path == path
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_default_options_stay_out_of_the_config_mapping():
    """Configs written before the options existed keep their mapping (variant and trial keys)."""
    from cem_ablate.model import parse_model_config

    assert "stream" not in parse_model_config({**DIMS, "stream": "residual"}).to_mapping()
    mapping = parse_model_config({**DIMS, "stream": "nesterov", "velocity_norm": "rms"}).to_mapping()
    assert (mapping["stream"], mapping["velocity_norm"]) == ("nesterov", "rms")
    assert parse_model_config(mapping).stream == "nesterov"


def test_a_velocity_stream_does_not_export_to_hugging_face():
    from cem_ablate.interop import to_hf_llama

    with pytest.raises(ConfigError) as info:
        to_hf_llama(stream_model("llama", randomize=False, stream="nesterov"))
    assert info.value.path == "model.stream"


def test_the_bench_forward_runs_the_velocity_stream():
    """bench.train_step.compiled_forward chains compiled blocks through the model's run_blocks."""
    from cem_ablate.bench.train_step import compiled_forward

    torch._dynamo.reset()
    model = stream_model("llama", stream="heavy_ball", velocity_norm="rms").float()
    batch = ids()
    assert (compiled_forward(model)(batch) - model.hidden_states(batch)).abs().max() <= 1e-4


def test_cli_components_lists_the_model_options_with_defaults():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", "components"], capture_output=True, text=True, check=True
    ).stdout
    listing = out[out.index("model options:") :]
    for fragment in [
        "stream = 'residual'",
        "stream_momentum = 0.5",
        "velocity_norm = 'none'",
        "block = 'sequential'",
        "nesterov",
        "parallel",
    ]:
        assert fragment in listing, fragment
