"""cem-ablate coord-check: the coordinate check can fail (standard) and tells mup apart."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from cem_ablate.bench.coord_check import CoordCheckResult, CoordCheckSettings, model_at_width, run_coord_check
from cem_ablate.cli.main import main

SMALL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_mlp": 88, "max_seq_len": 32}
SETTINGS = CoordCheckSettings(widths=(32, 64, 128), steps=3, seeds=1, batch_size=4, seq_len=32)


def test_slopes_are_least_squares_in_log_log_and_zero_for_zero_modules():
    settings = CoordCheckSettings(widths=(64, 128, 256), steps=2, threshold=0.1)
    result = CoordCheckResult(settings, "mup", {
        "grows": {64: [1.0, 1.0], 128: [2.0, 2.0], 256: [4.0, 4.0]},
        "flat": {64: [0.5, 0.7], 128: [0.5, 0.7], 256: [0.5, 0.7]},
        "zero": {64: [0.0, 1.0], 128: [0.0, 1.0], 256: [0.0, 1.0]},
    })
    slopes = result.slopes()
    assert slopes["grows"] == pytest.approx([1.0, 1.0])
    assert slopes["flat"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert slopes["zero"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert result.flagged() == ["grows"]
    assert "grows" in result.table().splitlines()[-1]


def test_model_at_width_scales_the_mlp_and_keeps_heads_and_depth():
    wide = model_at_width({"size": "tiny", "attention": {"name": "cem"}}, 256)
    assert (wide["d_model"], wide["n_heads"], wide["n_layers"], wide["d_mlp"]) == (256, 4, 2, 704)
    assert wide["attention"] == {"name": "cem"} and "size" not in wide


def test_standard_logits_grow_with_width_and_mup_logits_do_not():
    standard = run_coord_check({**SMALL, "parametrization": "standard"}, SETTINGS)
    zero = run_coord_check({**SMALL, "parametrization": "mup", "base_d_model": 32, "mup_readout": "zero"}, SETTINGS)
    assert min(standard.slopes()["logits"]) > 0.3  # init std 0.02 fixed: logits grow like sqrt(d)
    assert "logits" in standard.flagged()
    assert max(abs(s) for s in zero.slopes()["logits"]) < 0.1  # zero readout, lr / m
    assert zero.slopes()["logits"][0] == 0.0  # exactly zero at init at every width


def test_the_scaled_readouts_logits_start_at_m_to_the_minus_half_and_the_updates_take_over():
    """The default readout (init x m^-1 against standard's fixed std): the initial logits shrink
    as m^-1/2 with width, and the learned part, width-independent under lr / m, takes over."""
    mup = run_coord_check({**SMALL, "parametrization": "mup", "base_d_model": 32}, SETTINGS)
    slopes = mup.slopes()["logits"]
    assert slopes[0] == pytest.approx(-0.5, abs=0.1)
    assert abs(slopes[-1]) < abs(slopes[0])


def test_every_recursion_step_and_sublayer_is_recorded():
    model = {**SMALL, "parametrization": "mup", "base_d_model": 32,
             "attention": {"name": "cem", "steps": 2}, "mlp": {"name": "cem", "steps": 2, "update": "heavy_ball"}}
    result = run_coord_check(model, CoordCheckSettings(widths=(32, 64), steps=2, seeds=1, batch_size=2, seq_len=16))
    assert list(result.values) == ["embedding", "blocks.0.attention", "blocks.0.attention.step0",
                                   "blocks.0.attention.step1", "blocks.0.mlp", "blocks.0.mlp.step0",
                                   "blocks.0.mlp.step1", "logits"]
    for by_width in result.values.values():
        assert all(np.all(np.isfinite(v)) for v in by_width.values())


def test_cli_writes_table_figures_and_json_and_exits_1_when_a_module_exceeds(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": SMALL}))
    code = main(["coord-check", str(config), "--widths", "32,64", "--steps", "2", "--seeds", "1",
                 "--parametrization", "standard", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 1 and "exceed |slope| 0.1: " in out and "logits" in out.splitlines()[-2]
    for name in ("coord_check.png", "coord_check.svg", "coord_check.json"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    data = json.loads((tmp_path / "out" / "coord_check.json").read_text())
    assert data["parametrization"] == "standard" and "logits" in data["flagged"]


def test_cli_bad_input_is_one_error_line(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": SMALL}))
    assert main(["coord-check", str(config), "--widths", "32"]) == 2
    assert main(["coord-check", str(config), "model.parametrization=mu"]) == 2
    assert main(["coord-check", str(config), "model.n_heads=4", "--widths", "64,98"]) == 2  # 98 % 4 heads
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and err[0].startswith("error: --widths") and "model.parametrization" in err[1]
    assert err[2].startswith("error: --widths 98"), err[2]


def test_the_table_says_at_which_steps_and_which_way_a_module_exceeds():
    settings = CoordCheckSettings(widths=(64, 128, 256), steps=3, threshold=0.1)
    result = CoordCheckResult(settings, "mup", {
        "shrinks": {64: [1.0, 1.0, 1.0], 128: [2 ** -0.5, 0.9, 1.0], 256: [0.5, 0.81, 1.0]},
        "grows": {64: [1.0, 1.0, 1.0], 128: [1.0, 1.0, 2.0], 256: [1.0, 2.0, 4.0]},
    })
    rows = {line.split()[0]: line for line in result.table().splitlines()[2:4]}
    assert rows["shrinks"].endswith("<- exceeds at t1-t2 (shrinks with width)")
    assert rows["grows"].endswith("<- exceeds at t2-t3 (grows with width)")
