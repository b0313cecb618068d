"""cem-ablate coord-check: the coordinate check can fail (standard) and tells mup apart."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from cem_ablate.cli.coord_check_command import resolved_excess
from cem_ablate.cli.main import main
from cem_ablate.training.coord_check import CoordCheckResult, CoordCheckSettings, model_at_width, run_coord_check

SMALL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_mlp": 88, "max_seq_len": 32}
# One repeated batch: these tests read the exponents' algebra from one initialization at tiny widths,
# where a fresh batch's partial alignment with the last update adds an m^-1/2 part of its own (the
# zero readout's logits: 0.12 at some step with fresh batches of 4 x 32 tokens, within 0.092 with one).
SETTINGS = CoordCheckSettings(widths=(32, 64, 128), steps=3, seeds=1, batch_size=4, seq_len=32, fresh_batches=False)


def test_slopes_are_least_squares_in_log_log_and_zero_for_zero_modules():
    settings = CoordCheckSettings(widths=(64, 128, 256), steps=2, threshold=0.1)
    result = CoordCheckResult(
        settings,
        "mup",
        {
            "grows": {64: [[1.0, 1.0]], 128: [[2.0, 2.0]], 256: [[4.0, 4.0]]},
            "flat": {64: [[0.5, 0.7]], 128: [[0.5, 0.7]], 256: [[0.5, 0.7]]},
            "zero": {64: [[0.0, 1.0]], 128: [[0.0, 1.0]], 256: [[0.0, 1.0]]},
        },
    )
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


def test_the_output_may_shrink_before_the_last_step_and_strict_output_bounds_it_too():
    """muP's desiderata: the logits O(1) (one-sided) before the last step, Theta(1) at it; every
    other module two-sided at every step; --strict-output: the logits two-sided throughout."""
    shrinking_transient = {64: [[1.0, 1.0, 1.0]], 128: [[2**-0.5, 0.9, 1.0]], 256: [[0.5, 0.81, 1.0]]}
    samples = {
        "logits": shrinking_transient,
        "blocks.0.mlp": shrinking_transient,
        "embedding": {64: [[1.0] * 3], 128: [[1.0] * 3], 256: [[1.0] * 3]},
    }
    lenient = CoordCheckResult(CoordCheckSettings(widths=(64, 128, 256), steps=3), "mup", samples)
    assert lenient.flagged() == ["blocks.0.mlp"]
    row = next(line for line in lenient.table().splitlines() if line.startswith("logits"))
    assert row.endswith("(shrinks with width at t1-t2: the output may, muP's O(1); within the bound at the last step)")
    strict = CoordCheckResult(CoordCheckSettings(widths=(64, 128, 256), steps=3, strict_output=True), "mup", samples)
    assert strict.flagged() == ["logits", "blocks.0.mlp"]
    # still shrinking at the last step (a readout lr too small), or growing (standard): exceeds
    late = {64: [[1.0, 1.0]], 128: [[1.0, 0.5]], 256: [[1.0, 0.25]]}
    grows = {64: [[1.0, 1.0]], 128: [[2.0, 1.0]], 256: [[4.0, 1.0]]}
    for logits, where in ((late, "at t2 (shrinks with width)"), (grows, "at t1 (grows with width)")):
        result = CoordCheckResult(CoordCheckSettings(widths=(64, 128, 256), steps=2), "mup", {"logits": logits})
        assert result.flagged() == ["logits"] and f"<- exceeds {where}" in result.table()


def test_the_output_bound_is_one_sided_in_the_excess_test_too():
    """A true slope of -0.5 in the logits before the last step is never resolved as an excess
    (p ~ 1); at the last step, and +0.5 at any step, it is."""
    rng = np.random.default_rng(11)
    result = _simulated(rng, -0.5, (0.02, 0.02, 0.02, 0.02), 10, steps=3)
    result.samples["logits"] = result.samples.pop("m0")
    assert resolved_excess(result) == {"logits": [2]}
    up = _simulated(rng, 0.5, (0.02, 0.02, 0.02, 0.02), 10, steps=3)
    up.samples["logits"] = up.samples.pop("m0")
    assert resolved_excess(up) == {"logits": [0, 1, 2]}


def test_mup_with_the_scaled_readout_passes_once_its_logits_transient_is_over():
    """The default readout's logits start at m^-1/2 and the learned part takes over within a
    few steps: not flagged by muP's output bound, flagged by --strict-output."""
    settings = CoordCheckSettings(widths=(32, 64, 128), steps=10, seeds=1, batch_size=4, seq_len=32)
    model = {**SMALL, "parametrization": "mup", "base_d_model": 32}
    lenient = run_coord_check(model, settings)
    assert lenient.slopes()["logits"][0] < -0.3 and abs(lenient.slopes()["logits"][-1]) <= 0.1
    assert "logits" not in lenient.flagged()
    assert (
        "logits"
        in CoordCheckResult(
            CoordCheckSettings(**{**vars(settings), "strict_output": True}), "mup", lenient.samples
        ).flagged()
    )


def test_every_recursion_step_and_sublayer_is_recorded():
    model = {
        **SMALL,
        "parametrization": "mup",
        "base_d_model": 32,
        "attention": {"name": "cem", "steps": 2},
        "mlp": {"name": "cem", "steps": 2, "update": "heavy_ball"},
    }
    result = run_coord_check(model, CoordCheckSettings(widths=(32, 64), steps=2, seeds=1, batch_size=2, seq_len=16))
    assert list(result.values) == [
        "embedding",
        "blocks.0.attention",
        "blocks.0.attention.step0",
        "blocks.0.attention.step1",
        "blocks.0.mlp",
        "blocks.0.mlp.step0",
        "blocks.0.mlp.step1",
        "logits",
    ]
    for by_width in result.values.values():
        assert all(np.all(np.isfinite(v)) for v in by_width.values())


def test_cli_writes_table_figures_and_json_and_exits_1_when_a_module_exceeds(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": SMALL}))
    code = main(
        [
            "coord-check",
            str(config),
            "--widths",
            "32,64",
            "--steps",
            "2",
            "--seeds",
            "1",
            "--parametrization",
            "standard",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1 and "exceed |slope| 0.1 (the logits: slope <= +0.1 before the last step): " in out
    assert "logits" in out.splitlines()[-3]
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
    result = CoordCheckResult(
        settings,
        "mup",
        {
            "shrinks": {64: [[1.0, 1.0, 1.0]], 128: [[2**-0.5, 0.9, 1.0]], 256: [[0.5, 0.81, 1.0]]},
            "grows": {64: [[1.0, 1.0, 1.0]], 128: [[1.0, 1.0, 2.0]], 256: [[1.0, 2.0, 4.0]]},
        },
    )
    rows = {line.split()[0]: line for line in result.table().splitlines()[2:4]}
    assert rows["shrinks"].endswith("<- exceeds at t1-t2 (shrinks with width)")
    assert rows["grows"].endswith("<- exceeds at t2-t3 (grows with width)")


def test_an_excess_at_the_narrowest_width_alone_converges_and_a_power_law_does_not():
    # narrow: 30% more at d 64 only, flat beyond (a finite-width effect: slope -0.114 over all four
    # widths, 0 without d 64); power: w^-0.2 at every width (a wrong exponent: -0.2 either way)
    settings = CoordCheckSettings(widths=(64, 128, 256, 512), steps=2, threshold=0.1)
    result = CoordCheckResult(
        settings,
        "mup",
        {
            "narrow": {64: [[1.0, 1.3]], 128: [[1.0, 1.0]], 256: [[1.0, 1.0]], 512: [[1.0, 1.0]]},
            "power": {w: [[1.0, (w / 64) ** -0.2]] for w in (64, 128, 256, 512)},
        },
    )
    assert result.slopes()["narrow"][1] == pytest.approx(-1.5 * math.log(1.3) / (5 * math.log(2)))
    assert result.flagged() == ["narrow", "power"]
    assert result.without_narrowest("narrow") == pytest.approx({1: 0.0}, abs=1e-12)
    assert result.without_narrowest("power") == pytest.approx({1: -0.2})
    assert result.converges("narrow") and not result.converges("power")
    table = result.table().splitlines()
    assert table[2].endswith("without d 64: +0.00 at t2, converges to the right")
    assert table[3].endswith("without d 64: -0.20 at t2, does not converge")
    assert table[-1].startswith("within the bound without d 64") and table[-1].endswith(": narrow")
    assert result.to_dict()["converging"] == ["narrow"]
    # three widths: two left without the narrowest, no fit to tell by
    three = CoordCheckResult(
        CoordCheckSettings(widths=(64, 128, 256), steps=2),
        "mup",
        {"narrow": {w: result.samples["narrow"][w] for w in (64, 128, 256)}},
    )
    assert three.flagged() == ["narrow"] and three.without_narrowest("narrow") == {}
    assert not three.converges("narrow") and "without d" not in three.table()


def test_converging_tells_a_narrowest_width_excess_from_a_power_law_by_simulation():
    # the rates the table's line and `without_narrowest`'s docstring quote (10 initializations,
    # a log spread of 0.1 per width as measured at step 10): 400 checks per case
    rng = np.random.default_rng(7)

    def converging_share(mean):
        flagged = converging = 0
        for _ in range(400):
            samples = {
                "m": {w: [[float(mean(w) * math.exp(0.1 * rng.standard_normal()))] for _ in range(10)] for w in WIDTHS}
            }
            result = CoordCheckResult(CoordCheckSettings(widths=WIDTHS, steps=1, seeds=10), "mup", samples)
            if result.flagged():
                flagged += 1
                converging += result.converges("m")
        return flagged, converging / max(1, flagged)

    flagged, share = converging_share(lambda w: 1.5 if w == 64 else 1.0)  # d 64 alone, +50%
    assert flagged > 380 and share > 0.95
    flagged, share = converging_share(lambda w: (w / 64) ** -0.3)  # a wrong exponent
    assert flagged == 400 and share < 0.01
    flagged, share = converging_share(lambda w: (w / 64) ** -0.15)  # a wrong exponent near the bound
    assert flagged > 380 and share < 0.12


def test_fresh_batches_train_on_a_new_batch_each_step_and_start_from_the_fixed_one():
    model = {**SMALL, "parametrization": "mup", "base_d_model": 32}
    settings = CoordCheckSettings(widths=(32, 64), steps=3, seeds=1, batch_size=2, seq_len=16)
    fresh = run_coord_check(model, settings)  # the default
    fixed = run_coord_check(model, CoordCheckSettings(**{**vars(settings), "fresh_batches": False}))
    # step 1 sees the same batch from the same init; step 2 on sees what the step before trained on
    assert fresh.samples["logits"][32][0][0] == fixed.samples["logits"][32][0][0]
    assert fresh.samples["embedding"][32][0][1] != fixed.samples["embedding"][32][0][1]
    assert fresh.to_dict()["settings"]["fresh_batches"] is True
    assert fixed.to_dict()["settings"]["fresh_batches"] is False


def test_cli_checks_mup_from_the_narrowest_width_unless_told_the_base(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": {**SMALL, "parametrization": "mup", "base_d_model": 256}}))
    common = ["--widths", "32,64", "--steps", "1", "--seeds", "1"]
    main(["coord-check", str(config), *common, "--out", str(tmp_path / "a")])
    out = capsys.readouterr().out
    assert "base_d_model 32 (the narrowest width; the config's is 256: --base-d-model 256 checks with it)" in out
    assert json.loads((tmp_path / "a" / "coord_check.json").read_text())["base_d_model"] == 32
    main(["coord-check", str(config), *common, "--base-d-model", "256", "--out", str(tmp_path / "b")])
    header = capsys.readouterr().out.splitlines()[0]
    assert header.endswith("1 seeds, base_d_model 256"), header
    assert json.loads((tmp_path / "b" / "coord_check.json").read_text())["base_d_model"] == 256
    # a config that leaves base_d_model to its default (256) checked from 256 up: nothing to
    # override, and the record still names the base (this once raised KeyError after the work)
    config.write_text(yaml.safe_dump({"model": {**SMALL, "parametrization": "mup"}}))
    assert main(
        [
            "coord-check",
            str(config),
            "--widths",
            "256,512",
            "--steps",
            "1",
            "--seeds",
            "1",
            "--out",
            str(tmp_path / "c"),
        ]
    ) in (0, 1)
    assert capsys.readouterr().out.splitlines()[0].endswith("1 seeds, base_d_model 256")
    assert json.loads((tmp_path / "c" / "coord_check.json").read_text())["base_d_model"] == 256


WIDTHS = (64, 128, 256, 512)


def _simulated(rng, slope: float, cvs, seeds: int, steps: int = 1, modules: int = 1) -> CoordCheckResult:
    """A result whose per-initialization values are lognormal, log mean|a| = slope x log width +
    noise, with the seed-to-seed coefficients of variation `cvs` per width (the measured ones
    shrink with width: 0.25 -> 0.07 for full CEM's second MLP, 0.02 for the logits)."""
    samples = {}
    for k in range(modules):
        samples[f"m{k}"] = {}
        for w, cv in zip(WIDTHS, cvs):
            sigma = math.sqrt(math.log(1 + cv**2))
            samples[f"m{k}"][w] = (w**slope * np.exp(sigma * rng.standard_normal((seeds, steps)))).tolist()
    return CoordCheckResult(CoordCheckSettings(widths=WIDTHS, steps=steps, seeds=seeds), "mup", samples)


@pytest.mark.parametrize("seeds", [3, 10])
@pytest.mark.parametrize("cvs", [(0.25, 0.16, 0.10, 0.07), (0.1, 0.1, 0.1, 0.1)])
def test_the_slopes_95_percent_interval_covers_the_true_slope(seeds, cvs):
    """Coverage by simulation (float64): 4,000 tables, a true slope of 0.05, each width's own
    spread, n - 1 degrees of freedom (conservative: 0.95-0.99 where the spreads differ)."""
    from scipy import stats

    rng = np.random.default_rng(seeds)
    result = _simulated(rng, 0.05, cvs, seeds, steps=4000)
    slopes, errors = result.slopes()["m0"], result.slope_errors()["m0"]
    hits = [abs(s - 0.05) <= stats.t.ppf(0.975, df) * se for s, (se, df) in zip(slopes, errors)]
    assert 0.94 <= np.mean(hits) <= 0.995, np.mean(hits)


def test_the_excess_test_keeps_its_false_positive_rate_at_the_threshold_and_has_power():
    rng = np.random.default_rng(7)
    at_threshold = _simulated(rng, 0.1, (0.25, 0.16, 0.10, 0.07), 10, steps=4000).exceedance_pvalues()
    assert np.mean([p <= 0.05 for p in at_threshold.values()]) <= 0.06
    beyond = _simulated(rng, 0.3, (0.25, 0.16, 0.10, 0.07), 10, steps=500).exceedance_pvalues()
    assert np.mean([p <= 0.05 for p in beyond.values()]) >= 0.9


def test_holm_over_the_table_resolves_a_real_excess_and_rarely_a_noisy_one():
    """Family-wise: tables of 14 modules x 10 steps whose true slopes sit at the threshold
    resolve some excess in <= 5% of tables; a true slope of -0.5 (the scaled readout's logits
    at init) is resolved at every step with 10 initializations."""
    rng = np.random.default_rng(3)
    false_tables = sum(
        bool(resolved_excess(_simulated(rng, 0.1, (0.25, 0.16, 0.10, 0.07), 3, steps=10, modules=14)))
        for _ in range(300)
    )
    assert false_tables / 300 <= 0.05
    real = _simulated(rng, -0.5, (0.02, 0.02, 0.02, 0.02), 10, steps=10)
    assert resolved_excess(real) == {"m0": list(range(10))}
    assert "resolved at t1-t10" in real.table(resolved=resolved_excess(real))


def test_one_initialization_gives_no_standard_errors_and_says_so():
    result = CoordCheckResult(
        CoordCheckSettings(widths=(64, 128), steps=1, seeds=1), "mup", {"m": {64: [[1.0]], 128: [[4.0]]}}
    )
    assert all(math.isnan(se) for se, _ in result.slope_errors()["m"])
    assert result.exceedance_pvalues() == {}
    table = result.table(resolved=resolved_excess(result))
    assert "exceeds at t1 (grows with width); not resolved" in table
    assert table.splitlines()[-1].endswith("none (one initialization: no standard errors)")


def test_run_coord_check_keeps_every_initialization():
    result = run_coord_check(
        {**SMALL, "parametrization": "mup", "base_d_model": 32},
        CoordCheckSettings(widths=(32, 64), steps=2, seeds=2, batch_size=2, seq_len=16),
    )
    rows = result.samples["blocks.0.mlp"][32]
    assert len(rows) == 2 and len(rows[0]) == 2 and rows[0][0] != rows[1][0]  # two initializations differ
    assert result.values["blocks.0.mlp"][32][0] == pytest.approx(math.sqrt(rows[0][0] * rows[1][0]))  # geometric
    se, df = result.slope_errors()["blocks.0.mlp"][0]
    assert se > 0 and df == 1
