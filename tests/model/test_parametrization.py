"""model.parametrization: standard is the paper's model bit for bit; mup follows its rules."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from cem_ablate.config.errors import ConfigError
from cem_ablate.model.assembly import build_model
from cem_ablate.model.config import parse_model_config
from cem_ablate.model.parametrization import MUP_RULES, ParamClass, classify, inferred_class, init_exponent
from cem_ablate.training.optimizer import build_adamw
from tests.model import standard_regression

REFERENCE = json.loads((Path(__file__).parent / "data" / "standard_reference.json").read_text())
ROOT = Path(__file__).resolve().parents[2]

FULL = {
    "n_layers": 2,
    "n_heads": 4,
    "d_mlp": 176,
    "vocab_size": 256,
    "attention": {"name": "cem", "steps": 2, "kq_diag": "shared", "preconditioner": {"name": "diag_lowrank"}},
    "mlp": {"name": "cem", "steps": 2, "preconditioner": {"name": "diag_lowrank", "rank": 16}},
}


def _built(cfg, seed=0):
    torch.manual_seed(seed)
    return build_model(parse_model_config(cfg))


def test_standard_outputs_and_one_step_are_bit_identical_to_before_parametrizations():
    """Logits and one AdamW step of six configs equal those of 58995e8 (the reference file):
    bit for bit on a machine whose float64 kernels the reference has digests for, and on every
    machine within 1e-9 of each tensor's scale (standard_regression: another CPU's kernels sum
    in another order, so its bits differ with the code unchanged)."""
    outputs = standard_regression.outputs_of_configs()
    for name, parts in standard_regression.projections(outputs).items():
        for part, got in parts.items():
            ref = REFERENCE["projections"][name][part]
            gap = max(abs(a - b) for a, b in zip(got["values"], ref["values"]))
            assert gap <= 1e-9 * ref["scale"], (name, part, gap, ref["scale"])
    digests, by_machine = standard_regression.model_digests(outputs), REFERENCE["models_by_machine"]
    canary = standard_regression.kernel_canary()
    if canary in by_machine:
        assert digests == by_machine[canary]
    # else a machine whose canary is not recorded (the first reference machine's never was): the
    # projections above are its check; record one with standard_regression.py run on 58995e8


def test_the_projections_see_a_change_the_digests_see():
    """The tolerance is no blindfold: parameters 1e-4 off (relative) move the after-step
    projections far beyond 1e-9 of their scale."""
    outputs = standard_regression.outputs_of_configs()
    moved = {
        name: {"logits": parts["logits"], "after_step": [t * 1.0001 for t in parts["after_step"]]}
        for name, parts in outputs.items()
    }
    base, other = standard_regression.projections(outputs), standard_regression.projections(moved)
    for name in outputs:
        gap = max(abs(a - b) for a, b in zip(base[name]["after_step"]["values"], other[name]["after_step"]["values"]))
        assert gap > 1e-6 * base[name]["after_step"]["scale"], name


def test_study_variant_keys_are_unchanged_for_every_study_file():
    """Every variant of every study file and scale keeps its variant key (the config part of
    its trial key; the code fingerprint part changes with any edit of model/, by design)."""
    keys = standard_regression.study_variant_keys(ROOT / "studies")
    old = REFERENCE["variant_keys"]
    assert {k: keys[k] for k in old} == old


def test_explicit_standard_and_ignored_base_width_keep_the_mapping():
    plain = parse_model_config({"size": "tiny"})
    explicit = parse_model_config({"size": "tiny", "parametrization": "standard", "base_d_model": 128})
    assert explicit.to_mapping() == plain.to_mapping()
    mup = parse_model_config({"size": "tiny", "parametrization": "mup", "base_d_model": 128})
    assert mup.to_mapping()["parametrization"] == "mup" and mup.to_mapping()["base_d_model"] == 128


@pytest.mark.parametrize(
    "mapping, key",
    [
        ({"size": "tiny", "parametrization": "mu"}, "model.parametrization"),
        ({"size": "tiny", "parametrization": "mup", "base_d_model": 0}, "model.base_d_model"),
        ({"size": "tiny", "step_scaling": "sqrt"}, "model.step_scaling"),
        ({"size": "tiny", "parametrization": "mup", "mup_readout": "small"}, "model.mup_readout"),
        ({"size": "tiny", "readout_init_scale": 0}, "model.readout_init_scale"),
        ({"size": "tiny", "readout_init_scale": float("inf")}, "model.readout_init_scale"),
    ],
)
def test_bad_values_name_their_key(mapping, key):
    with pytest.raises(ConfigError) as err:
        parse_model_config(mapping)
    assert key in str(err.value)


def test_the_zero_readout_is_the_only_difference_from_standard_at_the_base_width():
    std = _built({**FULL, "d_model": 64})
    mup = _built({**FULL, "d_model": 64, "parametrization": "mup", "base_d_model": 64, "mup_readout": "zero"})
    for (name, a), (_, b) in zip(std.named_parameters(), mup.named_parameters()):
        if name == "lm_head.weight":
            assert torch.count_nonzero(b) == 0 and torch.count_nonzero(a) > 0
        else:
            assert torch.equal(a, b), name
    assert mup.dims.attention_temperature == math.sqrt(mup.dims.head_dim)
    groups = mup.parameter_groups(0.1)
    assert all(g["lr_multiplier"] == 1.0 for g in groups)


def test_mup_by_default_is_the_standard_model_at_the_base_width_and_muP_elsewhere():
    std = _built({**FULL, "d_model": 64})
    scaled = _built({**FULL, "d_model": 64, "parametrization": "mup", "base_d_model": 64})  # mup_readout: scaled
    for (name, a), (_, b) in zip(std.named_parameters(), scaled.named_parameters()):
        assert torch.equal(a, b), name
    wide_std = _built({**FULL, "d_model": 256})
    wide = _built({**FULL, "d_model": 256, "parametrization": "mup", "base_d_model": 64})
    # the same draw, times m^-1 = 1/4: muP's 1/fan_in^2 variance against standard's fixed std
    torch.testing.assert_close(wide.lm_head.weight, wide_std.lm_head.weight / 4, rtol=0, atol=0)
    plain = parse_model_config({"size": "tiny"}).to_mapping()
    assert parse_model_config({"size": "tiny", "mup_readout": "zero"}).to_mapping() == plain  # ignored under standard
    explicit = parse_model_config({"size": "tiny", "parametrization": "mup", "mup_readout": "scaled"}).to_mapping()
    assert explicit == parse_model_config({"size": "tiny", "parametrization": "mup"}).to_mapping()


@pytest.mark.parametrize("parametrization", ["standard", "mup"])
def test_readout_init_scale_multiplies_the_heads_init_alone_and_is_keyless_at_1(parametrization):
    """model.readout_init_scale: the LM head's init std x the scale (under mup on top of the
    scaled readout's m^-1), every other parameter the same draw; at 1 the mapping, hence every
    trial key, is the one without the key."""
    cfg = {**FULL, "d_model": 128, "parametrization": parametrization, "base_d_model": 64}
    plain, scaled = _built(cfg), _built({**cfg, "readout_init_scale": 10})
    for (name, a), (_, b) in zip(plain.named_parameters(), scaled.named_parameters()):
        if name == "lm_head.weight":
            torch.testing.assert_close(b, 10 * a, rtol=1e-6, atol=0)
        else:
            assert torch.equal(a, b), name
    mapping = parse_model_config(cfg).to_mapping()
    assert parse_model_config({**cfg, "readout_init_scale": 1.0}).to_mapping() == mapping
    assert parse_model_config({**cfg, "readout_init_scale": 10}).to_mapping() == {**mapping, "readout_init_scale": 10.0}


@pytest.mark.parametrize("width, readout", [(32, "scaled"), (128, "zero"), (256, "scaled")])
def test_mup_init_and_lr_follow_each_class_rule(width, readout):
    m = width / 64
    std = _built({**FULL, "d_model": width})
    mup = _built({**FULL, "d_model": width, "parametrization": "mup", "base_d_model": 64, "mup_readout": readout})
    classes = classify(mup, width)
    std_params = dict(std.named_parameters())
    for name, p in mup.named_parameters():
        cls = classes[name][0]
        init_exp = init_exponent(cls, mup.dims)
        assert init_exp == (None if cls is ParamClass.READOUT and readout == "zero" else MUP_RULES[cls][0])
        if init_exp is None:
            assert torch.count_nonzero(p) == 0
        else:
            torch.testing.assert_close(p, std_params[name] * m**init_exp, rtol=1e-6, atol=0)
    optimizer = build_adamw(mup.parameter_groups(0.1), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, kernel="single")
    lr_of = {id(p): (g["lr"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}
    for name, p in mup.named_parameters():
        lr, wd = lr_of[id(p)]
        assert lr == pytest.approx(1e-3 * m ** MUP_RULES[classes[name][0]][1]), name
        if wd:  # decoupled: the decay per step lr x wd is the base's at every width
            assert lr * wd == pytest.approx(1e-3 * 0.1), name


def test_the_classes_of_the_energy_layers_are_decided_not_inferred():
    model = _built({**FULL, "d_model": 64, "parametrization": "mup", "base_d_model": 64})
    classes = {name: cls for name, (cls, _) in classify(model, 64).items()}
    assert classes["blocks.0.attention.w_q.weight"] is ParamClass.HIDDEN  # W_Q and W_Q^T
    assert classes["blocks.0.mlp.v.weight"] is ParamClass.HIDDEN  # V and V^T
    assert classes["blocks.0.attention.precond.u"] is ParamClass.LOW_RANK_FACTOR
    assert classes["blocks.0.mlp.precond.v"] is ParamClass.LOW_RANK_FACTOR
    assert classes["blocks.0.mlp.precond.p"] is ParamClass.SQRT_WIDTH_VECTOR
    assert classes["blocks.0.attention.kq_diag"] is ParamClass.VECTOR
    assert classes["embed_tokens.weight"] is ParamClass.EMBEDDING
    assert classes["lm_head.weight"] is ParamClass.READOUT


def test_mup_attention_temperature_grows_with_the_head_dim():
    dims = [
        parse_model_config({**FULL, "d_model": d, "parametrization": "mup", "base_d_model": 64}).dims
        for d in (64, 128, 256)
    ]
    taus = [d.attention_temperature for d in dims]
    assert taus[0] == pytest.approx(math.sqrt(16))
    assert taus[1] / taus[0] == pytest.approx(2.0) and taus[2] / taus[0] == pytest.approx(4.0)


def test_inverse_steps_divides_eta_by_the_steps():
    base = {
        **FULL,
        "d_model": 64,
        "mlp": {"name": "llama"},
        "attention": {"name": "cem", "steps": 4, "step_size": 0.5, "impl": "reference"},
    }
    scaled = _built({**base, "step_scaling": "inverse_steps"})
    explicit = _built({**base, "attention": {**base["attention"], "step_size": 0.125}})
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(3))
    assert scaled.blocks[0].attention.step_size == 0.125
    assert torch.equal(scaled(ids), explicit(ids))


def test_undeclared_parameters_are_inferred_from_their_shape():
    assert inferred_class(torch.Size([64, 64]), 64) is ParamClass.HIDDEN
    assert inferred_class(torch.Size([176, 64]), 64) is ParamClass.HIDDEN
    assert inferred_class(torch.Size([4, 64]), 64) is ParamClass.VECTOR
    assert inferred_class(torch.Size([64, 16]), 64) is ParamClass.VECTOR
    assert inferred_class(torch.Size([64]), 64) is ParamClass.VECTOR


@dataclass
class _Declares(nn.Module):
    def __post_init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.zeros(64, 8))
        self.b = nn.Parameter(torch.zeros(64, 64))

    def parameter_classes(self):
        return {"a": "low_rank_factor"}

    __hash__ = nn.Module.__hash__


def test_a_module_declaration_wins_over_inference():
    holder = nn.Module()
    holder.inner = _Declares()
    classes = classify(holder, 64)
    assert classes["inner.a"] == (ParamClass.LOW_RANK_FACTOR, "_Declares")
    assert classes["inner.b"] == (ParamClass.HIDDEN, "inferred")
