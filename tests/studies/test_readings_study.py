"""The readings study files (docs/design/layers.md#s2-cem-attention's open readings): arms, pairings and the CPU recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from cem_ablate.cli.study_command import load_expanded

STUDIES = Path(__file__).resolve().parents[2] / "studies"
ARMS = ["A_T1", "A_T2", "B_T1", "B_T2", "C_T1", "C_T2", "D_T1", "D_T2", "E_T1"]


def expanded(name: str, scale: str | None = "cpu", overrides=()):
    return load_expanded(str(STUDIES / f"{name}.yaml"), scale, list(overrides))


def attention(variant) -> dict:
    return variant.run_config(2e-3, 0).model.to_mapping()["attention"]


@pytest.mark.parametrize("scale", [None, "cpu", "smoke"])
def test_every_arm_is_paired_with_its_own_t1(scale):
    study = expanded("readings", scale)
    by_key = {v.key: v for v in study.variants}
    assert [v.name for v in study.variants] == ARMS  # no extra baseline variants
    pairs = {v.name: by_key[k].name for v in study.variants for k in v.baselines.values()}
    assert pairs == {"A_T2": "A_T1", "B_T2": "B_T1", "C_T2": "C_T1", "D_T2": "D_T1", "E_T1": "A_T1"}


def test_arms_change_one_thing_each():
    arms = {v.name: attention(v) for v in expanded("readings").variants}
    a = arms["A_T2"]
    assert (a["preconditioner"]["name"], a["diag_update"], a["recursion_state"], a["kq_diag"]) == (
        "diag",
        "paper",
        "raw",
        "shared",
    )
    differs = {name: {k for k in a if arms[name][k] != a[k]} for name in ("B_T2", "C_T2", "D_T2")}
    assert differs == {"B_T2": {"preconditioner"}, "C_T2": {"diag_update"}, "D_T2": {"recursion_state"}}
    assert {k for k in a if arms["E_T1"][k] != a[k]} == {"kq_diag", "steps"}


def test_cpu_recipe():
    study = expanded("readings")
    config = study.variants[0].run_config(2e-3, 0)
    assert study.spec.name == "readings_3seeds_cpu" and list(study.spec.seeds) == [0, 1, 2]
    assert study.spec.lr_search.grid == [2e-3]
    assert (config.train.max_steps, config.train.batch_size, config.data.block_size) == (600, 16, 128)
    assert config.model.dims.d_model == 64 and config.model.mlp.name == "llama"


def test_arm_f_is_arm_a_at_d128_with_two_seeds():
    study = expanded("readings_d128")
    dims = study.variants[0].run_config(2e-3, 0).model.dims
    assert (dims.d_model, dims.n_layers, dims.n_heads, dims.d_mlp) == (128, 2, 4, 344)
    assert list(study.spec.seeds) == [0, 1]
    a = {v.name: attention(v) for v in expanded("readings").variants}
    f = {v.name: attention(v) for v in study.variants}
    assert f == {"F_T1": a["A_T1"], "F_T2": a["A_T2"]}


def test_gap_study_switches_the_reading_by_set():
    reading = [
        "base.model.attention.recursion_state=normalized",
        "base.model.mlp.recursion_state=normalized",
        "base.model.attention.diag_update=exact",
    ]
    study = expanded("readings_gap", "cpu", reading)
    full = next(v for v in study.variants if v.name == "full_cem_T2")
    model = full.run_config(2e-3, 0).model.to_mapping()
    assert model["attention"]["recursion_state"] == model["mlp"]["recursion_state"] == "normalized"
    assert model["attention"]["diag_update"] == "exact" and model["attention"]["steps"] == 2
    assert [v.name for v in study.variants] == ["full_cem_T2", "llama"]
    assert study.spec.lr_search.grid == [5e-4, 1e-3, 2e-3, 4e-3, 8e-3] and list(study.spec.seeds) == [0, 1]
