import pytest
import torch

from cem_ablate import build_model
from cem_ablate.model import llama_baseline_params, model_report, parse_model_config

TABLE_1 = {"86M": 86_371_488, "108M": 108_052_896, "134M": 134_105_856, "162M": 162_813_024}
SMALL = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_mlp": 64, "vocab_size": 50}


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("size,count", TABLE_1.items())
def test_llama_parameter_counts_equal_table_1(size, count):
    with torch.device("meta"):
        model = build_model({"size": size})
    assert n_params(model) == count
    assert llama_baseline_params(parse_model_config({"size": size})) == count


def test_cem_sublayers_halve_and_tie_matrices():
    model = build_model({**SMALL, "attention": "cem", "mlp": "cem"})
    att, mlp = model.blocks[0].attention, model.blocks[0].mlp
    att_matrices = sum(p.numel() for n, p in att.named_parameters() if p.dim() == 2)
    mlp_matrices = sum(p.numel() for n, p in mlp.named_parameters() if p.dim() == 2)
    assert att_matrices == 2 * 32 * 32
    assert mlp_matrices == 2 * 32 * 64


def test_param_matched_mlp_equals_swiglu_parameters():
    llama = build_model({**SMALL, "d_mlp": 64})
    cem = build_model({**SMALL, "d_mlp": 64, "mlp": "cem_param_matched"})
    llama_mlp = sum(p.numel() for p in llama.blocks[0].mlp.parameters())
    cem_mlp = sum(p.numel() for p in cem.blocks[0].mlp.parameters())
    assert llama_mlp == cem_mlp


@pytest.mark.parametrize("kind,name", [("attention", "cem"), ("mlp", "cem"), ("attention", "llama"), ("mlp", "llama")])
def test_reuse_applies_the_whole_sublayer_again(kind, name):
    torch.manual_seed(0)
    model = build_model({**SMALL, kind: {"name": name, "steps": 2, "depth_mode": "reuse"}}).double()
    block = model.blocks[0]
    sub = getattr(block, kind)
    h = torch.randn(2, 5, 32, dtype=torch.float64)
    if kind == "attention":
        assert torch.allclose(block(h), block.mlp(sub(sub(h))))
    else:
        assert torch.allclose(block(h), sub(sub(block.attention(h))))


@pytest.mark.parametrize("kind", ["attention", "mlp"])
def test_reuse_differs_from_recursion(kind):
    torch.manual_seed(0)
    reuse = build_model({**SMALL, kind: {"name": "cem", "steps": 2, "depth_mode": "reuse"}}).double()
    torch.manual_seed(0)
    recursion = build_model({**SMALL, kind: {"name": "cem", "steps": 2}}).double()
    assert n_params(reuse) == n_params(recursion)
    ids = torch.randint(0, 50, (2, 9))
    assert not torch.allclose(reuse(ids), recursion(ids), atol=1e-6)


def test_forward_shape_and_dtype():
    model = build_model(
        {
            **SMALL,
            "attention": {"name": "cem", "steps": 2, "kq_diag": "per_head"},
            "mlp": {"name": "cem", "steps": 2, "preconditioner": "diag_lowrank"},
        }
    )
    logits = model(torch.randint(0, 50, (3, 11)))
    assert logits.shape == (3, 11, 50)
    assert torch.isfinite(logits).all()


def test_parameter_groups_decay_only_matrices_and_embeddings():
    model = build_model(
        {
            **SMALL,
            "attention": {
                "name": "cem",
                "kq_diag": "shared",
                "preconditioner": "diag_lowrank",
                "learnable_step_size": True,
            },
        }
    )
    decay, no_decay = model.parameter_groups(0.1)
    named = {id(p): n for n, p in model.named_parameters()}
    decayed = {named[id(p)] for p in decay["params"]}
    not_decayed = {named[id(p)] for p in no_decay["params"]}
    assert "embed_tokens.weight" in decayed and "lm_head.weight" in decayed
    assert "blocks.0.attention.w_q.weight" in decayed
    for frag in ["norm.weight", "kq_diag", "precond.p", "precond.u", "precond.v", "self_bias", "step_size"]:
        assert any(frag in n for n in not_decayed), frag
        assert not any(frag in n for n in decayed), frag
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert len(decayed) + len(not_decayed) == len(list(model.parameters()))


def test_energy_tracking_reports_every_step():
    model = build_model({**SMALL, "attention": {"name": "cem", "steps": 2}, "mlp": {"name": "cem", "steps": 3}})
    model.set_energy_tracking(True)
    model(torch.randint(0, 50, (2, 8)))
    trace = model.energy_trace()
    assert "blocks.1.attention/step2" in trace and "blocks.0.mlp/step3" in trace
    assert len(trace) == 2 * (3 + 4)
    model.set_energy_tracking(False)
    model(torch.randint(0, 50, (2, 8)))
    assert model.energy_trace() == {}


def test_report_counts_parameters_by_component():
    model = build_model({**SMALL, "attention": "cem"})
    report = model_report(model, seq_len=16)
    assert report.params_total == n_params(model)
    assert report.params_by_component["embedding"] == 50 * 32
    assert report.params_by_component["head"] == 50 * 32
    assert report.params_by_component["attention"] == 2 * (2 * 32 * 32 + 4)  # + self biases; norms apart
    assert report.params_by_component["norms"] == 2 * 2 * 32 + 32
