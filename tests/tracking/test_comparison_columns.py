"""The display columns of a parent run: short names MLflow accepts, values at <= 4
significant digits, and the runs-table order the UI opens on."""

import math

import pytest
from mlflow.utils.validation import _validate_metric_name, _validate_tag_name

from cem_ablate.tracking.comparison_columns import BaselineAnswer, display_record, interval_text, rounded, view_columns

ANSWERS = [
    BaselineAnswer("llama", -0.14893621, -0.31245, 0.01245678, 0.0123456, 0.0370368, "unresolved"),
    BaselineAnswer("T1", 2.176543, 1.0049, 3.3482, 1.234567e-5, 2.469134e-5, "worse"),
]


def significant_digits(value: float) -> int:
    return len(f"{abs(value):.15e}".split("e")[0].replace(".", "").rstrip("0"))


@pytest.mark.parametrize(
    "value, expected",
    [
        (-0.14893621, -0.1489),
        (16.91234567, 16.91),
        (0.0021234, 0.002123),
        (1.234567e-5, 1.235e-5),
        (123456.7, 123500.0),
        (0.0, 0.0),
    ],
)
def test_values_are_rounded_to_four_significant_digits(value, expected):
    assert rounded(value) == expected and significant_digits(rounded(value)) <= 4


@pytest.mark.parametrize("value", [None, math.nan, math.inf])
def test_a_missing_value_is_not_logged(value):
    assert rounded(value) is None


def test_the_interval_is_one_short_text():
    assert interval_text(-0.31245, 0.01245678) == "[-0.312, 0.0125]"
    assert interval_text(100.2, 1234.5) == "[100, 1.23e+03]"
    assert interval_text(None, 1.0) == interval_text(math.nan, 1.0) == "-"


def test_the_record_per_baseline_names_fit_and_mlflow_accepts_them():
    metrics, tags = display_record(ANSWERS, "holm", "ppl", lr_star=0.0021234, objective_star=16.91234567)
    assert metrics == {
        "lr opt": 0.002123,
        "ppl opt": 16.91,
        "Δ llama": -0.1489,
        "Holm p llama": 0.03704,
        "p llama": 0.01235,
        "Δ T1": 2.177,
        "Holm p T1": 2.469e-5,
        "p T1": 1.235e-5,
    }
    assert tags == {
        "CI llama": "[-0.312, 0.0125]",
        "verdict llama": "unresolved",
        "CI T1": "[1.00, 3.35]",
        "verdict T1": "worse",
    }
    for name in metrics:
        _validate_metric_name(name)  # raises on a name MLflow refuses (e.g. "lr*", "95% CI")
        assert len(name) <= len("Holm p llama")
    for name in tags:
        _validate_tag_name(name)


def test_without_a_correction_the_adjusted_p_says_what_it_is():
    metrics, _ = display_record(ANSWERS[:1], "none", "RMSE", None, None)
    assert "design p llama" in metrics and "Holm p llama" not in metrics
    assert metrics["lr opt"] is None and metrics["RMSE opt"] is None  # no optimum yet: not logged


def test_the_view_reads_per_baseline_the_answer_then_the_optimum_then_p():
    metrics, tags = display_record(ANSWERS, "holm", "ppl", 0.002, 16.9)
    noise = {"delta_vs_llama", "objective_star"}
    columns = view_columns(["T1", "llama"], set(metrics) | noise, set(tags) | {"cem_ablate.verdict.llama"})
    assert columns == [
        "metrics.`Δ T1`",
        "tags.`CI T1`",
        "metrics.`Holm p T1`",
        "tags.`verdict T1`",
        "metrics.`Δ llama`",
        "tags.`CI llama`",
        "metrics.`Holm p llama`",
        "tags.`verdict llama`",
        "metrics.`ppl opt`",
        "metrics.`lr opt`",
        "metrics.`p T1`",
        "metrics.`p llama`",
    ]
    assert view_columns(["llama"], {"objective_star"}, {"cem_ablate.verdict.llama"}) == []  # published before them


def test_the_view_lists_a_baselines_columns_before_their_first_value():
    """A browser stores the view once: opened while the first trials train, it must
    already hold the columns the study will log (only the verdict tag is there yet)."""
    columns = view_columns(["llama"], {"lr opt", "ppl opt"}, {"verdict llama", "CI llama"})
    assert columns == [
        "metrics.`Δ llama`",
        "tags.`CI llama`",
        "metrics.`Holm p llama`",
        "metrics.`design p llama`",
        "tags.`verdict llama`",
        "metrics.`ppl opt`",
        "metrics.`lr opt`",
        "metrics.`p llama`",
    ]
