"""The momentum study (docs/design/energy-lens.md#s11-energy-lens): arms, pairings and the readings study's CPU recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from cem_ablate.cli.study_command import load_expanded

STUDIES = Path(__file__).resolve().parents[2] / "studies"
ARMS = [
    "T1",
    "T2_gd",
    "T2_heavy_ball",
    "T2_nesterov",
    "T4_gd",
    "T4_heavy_ball",
    "T4_nesterov",
    "llama_nesterov_stream",
    "parallel_hopfield_T1",
    "parallel_hopfield_T2",
]


def expanded(name: str, scale: str | None):
    return load_expanded(str(STUDIES / f"{name}.yaml"), scale, [])


@pytest.mark.parametrize("scale", [None, "cpu", "smoke"])
def test_every_arm_is_paired_with_its_baselines(scale):
    study = expanded("momentum", scale)
    by_key = {v.key: v for v in study.variants}
    assert [v.name for v in study.variants] == ARMS + ["llama"]  # one extra run: plain Llama
    pairs = {v.name: {name: by_key[k].name for name, k in v.baselines.items()} for v in study.variants}
    for arm in ARMS[1:7]:
        assert pairs[arm] == {"T1": "T1", "llama": "llama"}
    assert pairs["llama_nesterov_stream"]["llama"] == "llama"
    assert pairs["parallel_hopfield_T1"] == {"llama": "llama"}
    assert pairs["parallel_hopfield_T2"] == {"T1": "parallel_hopfield_T1", "llama": "llama"}


def test_arms_change_what_they_say():
    study = expanded("momentum", "cpu")
    models = {v.name: v.run_config(2e-3, 0).model for v in study.variants}
    for arm in ARMS[1:7]:
        steps, update = arm.split("_", 1)
        attention = models[arm].attention
        assert attention.steps == int(steps[1:]) and attention.options.update == update
        assert attention.options.learnable_momentum == (update != "gd")
        assert (attention.options.kq_diag, attention.options.preconditioner.name) == ("shared", "diag")
    stream = models["llama_nesterov_stream"]
    assert (stream.stream, stream.attention.name, stream.mlp.name) == ("nesterov", "llama", "llama")
    assert models["llama"].stream == "residual"
    for steps in (1, 2):
        parallel = models[f"parallel_hopfield_T{steps}"]
        assert (parallel.block, parallel.attention.name, parallel.mlp.name) == ("parallel", "cem", "hopfield")
        assert parallel.attention.steps == parallel.mlp.steps == steps


def test_cpu_recipe_is_the_readings_studys():
    study = expanded("momentum", "cpu")
    readings = expanded("readings", "cpu")
    ours, theirs = (s.variants[0].run_config(2e-3, 0) for s in (study, readings))
    assert ours.model.to_mapping() == theirs.model.to_mapping()  # T1 = readings arm A's T = 1
    assert ours.train == theirs.train and ours.data == theirs.data
    assert study.spec.lr_search.grid == readings.spec.lr_search.grid == [2e-3]
    assert list(study.spec.seeds) == [0, 1, 2]
    assert study.spec.name == "momentum_cpu" and "recursion penalty" in study.spec.description


def test_dry_run_lists_the_arms(capsys):
    from cem_ablate.cli.main import main

    assert main(["study", str(STUDIES / "momentum.yaml"), "--scale", "cpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for arm in ARMS:
        assert arm in out, arm
    assert "llama (baseline)" in out and "total: 33 trials" in out
