import pytest

from cem_ablate import build_model
from cem_ablate.model import model_report

SMALL = {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_mlp": 128, "vocab_size": 100}


def flops(**sub):
    return model_report(build_model({**SMALL, **sub}), seq_len=32)


def test_llama_flops_match_hand_count():
    report = flops()
    D, M, V, J = 64, 128, 100, 32
    ctx = (J + 1) / 2
    per_layer = 2 * 4 * D * D + 4 * ctx * D + 2 * 3 * D * M
    assert report.flops_per_token == pytest.approx(2 * per_layer + 2 * D * V)
    assert report.train_flops_per_token == pytest.approx(3 * report.flops_per_token)


def test_recursion_is_counted_per_step():
    one = flops(mlp={"name": "cem", "steps": 1}).flops_by_module["blocks.0.mlp"]
    three = flops(mlp={"name": "cem", "steps": 3}).flops_by_module["blocks.0.mlp"]
    D, M = 64, 128
    assert three - one == pytest.approx(2 * (4 * D * M + 2 * M))  # gamma is computed once


def test_reuse_counts_the_whole_sublayer_again():
    one = flops(attention={"name": "cem"}).flops_by_module["blocks.0.attention"]
    reuse = flops(attention={"name": "cem", "steps": 2, "depth_mode": "reuse"}).flops_by_module["blocks.0.attention"]
    recursion = flops(attention={"name": "cem", "steps": 2}).flops_by_module["blocks.0.attention"]
    assert reuse == pytest.approx(2 * one)
    assert one < recursion < reuse  # keys/values are computed once under recursion


def test_cem_uses_more_compute_per_parameter_than_6n_suggests():
    report = flops(attention={"name": "cem", "steps": 2}, mlp={"name": "cem", "steps": 2})
    non_embedding = report.params_total - report.params_by_component["embedding"]
    assert report.flops_per_token > 2 * non_embedding


def test_truncated_backprop_drops_the_backward_of_frozen_steps():
    """backprop_steps: k runs T - k steps forward only (docs/design/layers.md#s2-cem-attention): same forward FLOPs,
    2x forward-of-a-step less backward per frozen step, per CEM sublayer."""
    sub = {"name": "cem", "steps": 4}
    full = flops(attention=sub, mlp=sub)
    truncated = flops(attention={**sub, "backprop_steps": 1}, mlp={**sub, "backprop_steps": 1})
    assert truncated.flops_per_token == full.flops_per_token
    assert full.train_flops_per_token == pytest.approx(3 * full.flops_per_token)
    one_step = {"name": "cem", "steps": 1}
    two_steps = {"name": "cem", "steps": 2}
    # forward FLOPs of one step of every CEM sublayer in the model
    per_step = (
        flops(attention=two_steps, mlp=two_steps).flops_per_token
        - flops(attention=one_step, mlp=one_step).flops_per_token
    )
    assert per_step > 0
    frozen = 4 - 1
    assert full.train_flops_per_token - truncated.train_flops_per_token == pytest.approx(2 * frozen * per_step)


def test_normalized_state_costs_the_same_flops():
    raw = flops(attention={"name": "cem", "steps": 2}, mlp={"name": "cem", "steps": 2})
    normalized = flops(
        attention={"name": "cem", "steps": 2, "recursion_state": "normalized"},
        mlp={"name": "cem", "steps": 2, "recursion_state": "normalized"},
    )
    assert normalized.flops_by_module == raw.flops_by_module  # norms and adds are not counted
