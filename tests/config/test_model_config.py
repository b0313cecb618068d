"""Bad model configs fail with one sentence naming the key, before any module is built."""

import pytest

from cem_ablate import build_model
from cem_ablate.config import ConfigError
from cem_ablate.model import parse_model_config

BASE = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_mlp": 64, "vocab_size": 50}


def error_of(cfg) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build_model(cfg)
    return info.value


@pytest.mark.parametrize(
    "cfg,path,fragments",
    [
        ({**BASE, "attention": {"name": "cme"}}, "model.attention.name", ["'cme'", "'cem'"]),
        ({**BASE, "mlp": "swiglu2"}, "model.mlp.name", ["swiglu2", "llama"]),
        ({**BASE, "attention": {"name": "cem", "kq_dig": "shared"}}, "model.attention.kq_dig", ["kq_diag"]),
        ({**BASE, "attention": {"name": "cem", "kq_diag": "sharde"}}, "model.attention.kq_diag", ["shared"]),
        (
            {**BASE, "attention": {"name": "cem", "preconditioner": "diag_lowrnk"}},
            "model.attention.preconditioner.name",
            ["diag_lowrank"],
        ),
        (
            {**BASE, "attention": {"name": "cem", "preconditioner": {"name": "diag_lowrank", "rank": 32}}},
            "model.attention.preconditioner.rank",
            ["d_model=32"],
        ),
        ({**BASE, "n_heads": 5}, "model.d_model", ["not divisible", "n_heads=5"]),
        ({**BASE, "d_mlp": -3}, "model.d_mlp", ["positive"]),
        ({**BASE, "attention": {"name": "cem", "steps": 0}}, "model.attention.steps", [">= 1"]),
        ({**BASE, "attention": {"name": "llama", "steps": 2}}, "model.attention.steps", ["depth_mode: reuse"]),
        ({**BASE, "mlp": {"name": "cem", "depth_mode": "loop"}}, "model.mlp.depth_mode", ["recursion", "reuse"]),
        ({**BASE, "hidden": 3}, "model.hidden", ["Allowed"]),
        ({"size": "87M"}, "model.size", ["86M"]),
        ({"n_layers": 2}, "model.d_model", ["required"]),
        ({**BASE, "mlp": {"name": "cem", "step_size": "big"}}, "model.mlp.step_size", ["number"]),
        ({**BASE, "mlp": {"name": "cem", "width_multiplier": 0}}, "model.mlp.width_multiplier", ["> 0"]),
    ],
)
def test_bad_config_names_the_key(cfg, path, fragments):
    err = error_of(cfg)
    assert err.path == path
    assert "\n" not in str(err)
    for fragment in fragments:
        assert fragment in str(err)


def test_preconditioner_shorthand_and_defaults():
    cfg = parse_model_config({**BASE, "attention": {"name": "cem", "preconditioner": "diag_lowrank"}})
    assert cfg.attention.options.preconditioner.name == "diag_lowrank"
    assert cfg.attention.options.kq_diag == "none"
    assert cfg.mlp.name == "llama"


def test_preset_with_explicit_override():
    cfg = parse_model_config({"size": "86M", "n_layers": 2, "vocab_size": 256})
    assert (cfg.dims.d_model, cfg.dims.n_layers, cfg.dims.vocab_size) == (672, 2, 256)


def test_round_trip_through_mapping():
    cfg = parse_model_config(
        {
            **BASE,
            "attention": {"name": "cem", "steps": 2, "kq_diag": "shared"},
            "mlp": {"name": "cem", "depth_mode": "reuse", "steps": 2},
        }
    )
    assert parse_model_config(cfg.to_mapping()) == cfg
