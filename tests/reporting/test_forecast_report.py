"""reporting/forecast_report.py: the forecast section of a forecast study's report, from its
validated study file and trial records that follow a known law (no training)."""

from __future__ import annotations

import math

import numpy as np

from cem_ablate.cli.study_command import load_expanded
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.reporting.forecast_report import forecast_section
from cem_ablate.study.estimates import estimate
from cem_ablate.tracking.readback import VariantRecord
from tests.study.test_forecast_study import forecast_study


def _records(expanded, gap: float, drop: str | None = None, noise: float = 0.01):
    """Per variant, 3 seeds of exp(law in its parameters + family gap + noise) at its one rate."""
    rng = np.random.default_rng(0)
    records = []
    for v in expanded.variants:
        n = estimate(v.run_config(1e-3, 0)).params_total
        log_ppl = 3.0 - 0.3 * math.log(n / 1e4) + (gap if v.family == "cem_attention" else 0.0)
        trials = (
            []
            if v.name == drop
            else [
                TrialRecord(2e-3, s, TrialStatus.FINISHED, float(math.exp(log_ppl + rng.normal(0, noise))))
                for s in range(3)
            ]
        )
        records.append(
            VariantRecord("run", v.key, v.name, v.role, "finished", v.axis_values, v.baselines, {}, None, trials=trials)
        )
    return records


def test_the_section_says_it_extrapolates_and_forecasts_a_clear_gap_as_worse(tmp_path):
    expanded = load_expanded(str(forecast_study(tmp_path)), None, [])
    lines = forecast_section(_records(expanded, gap=0.2), expanded, "test perplexity")
    text = "\n".join(lines)
    assert lines[0] == "## Forecast"
    assert "**An extrapolation, not a measurement.**" in text and "d_model 256, which was not trained" in text
    row = next(line for line in lines if line.startswith("| cem_attention vs llama |"))
    assert row.endswith("| worse |")
    assert {
        line.split(" | ")[0] for line in lines if line.startswith("| llama |") or line.startswith("| cem_attention |")
    } == {"| llama", "| cem_attention"}
    assert "power_shared" in text and "α " in text  # the form and its shared exponent


def test_a_gap_within_the_noise_is_unresolved_and_a_missing_width_gets_no_forecast(tmp_path):
    expanded = load_expanded(str(forecast_study(tmp_path)), None, [])
    lines = forecast_section(_records(expanded, gap=0.0, noise=0.1), expanded, "test perplexity")
    row = next(line for line in lines if line.startswith("| cem_attention vs llama |"))
    assert row.endswith("| unresolved |")
    narrow = next(v.name for v in expanded.variants if v.family == "llama")
    lines = forecast_section(_records(expanded, gap=0.2, drop=narrow), expanded, "test perplexity")
    assert lines[2].startswith("No forecast: llama finished fewer than 3")


def test_a_ladder_outside_the_trusted_widths_says_its_forecasts_may_run_low(tmp_path):
    from tests.study.test_forecast_study import LADDER

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    trusted = load_expanded(str(forecast_study(tmp_path / "a")), None, [])
    assert "may run low" not in "\n".join(forecast_section(_records(trusted, gap=0.2), trusted, "test perplexity"))
    narrow = [{"model.d_model": 16, "model.d_mlp": 32}] + LADDER[:2]  # d_head 8, below base d 32
    expanded = load_expanded(str(forecast_study(tmp_path / "b", ladder=narrow)), None, [])
    text = "\n".join(forecast_section(_records(expanded, gap=0.2), expanded, "test perplexity"))
    assert "**These forecasts may run low.**" in text and "ladder width d_model 16 (d_head 8 < 16" in text


def test_other_studies_have_no_forecast_section(tmp_path):
    from tests.study.tiny_study import write_study

    expanded = load_expanded(str(write_study(tmp_path, "plain")), None, [])
    assert forecast_section([], expanded, "test perplexity") == []
