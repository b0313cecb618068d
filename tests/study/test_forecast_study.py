"""`forecast:` in a study file: validated once (one `error:` line, nothing created), expanded
into every family at every ladder width (each with its proxy, its baseline at the same width)
plus each family at the target; and the trusted-width warning before a transfer trains."""

from __future__ import annotations

import pytest

from cem_ablate.cli.main import main
from cem_ablate.cli.study_command import load_expanded
from cem_ablate.study.trusted_widths import trust_warning, untrusted_widths
from tests.study.tiny_study import write_study

LADDER = [
    {"model.d_model": 32, "model.d_mlp": 64},
    {"model.d_model": 64, "model.d_mlp": 128},
    {"model.d_model": 96, "model.d_mlp": 192},
]
TARGET = {"model.d_model": 256, "model.d_mlp": 512}
TRANSFER = {"method": "transfer", "proxy": {"model.d_model": 32, "model.d_mlp": 64}, "grid": [1e-3, 4e-3]}


def forecast_study(tmp_path, ladder=LADDER, target=TARGET, lr_search=TRANSFER, mup=True, **extra):
    """The tiny study (2 heads) as a forecast: d_head 16, 32, 48 on the ladder, base d 32."""
    path = write_study(tmp_path, "fc", lr_search=lr_search, forecast={"ladder": ladder, "target": target}, **extra)
    if mup:
        path.write_text(
            path.read_text().replace(
                "max_seq_len: 32", "max_seq_len: 32\n    parametrization: mup\n    base_d_model: 32"
            )
        )
    return path


def test_every_family_is_trained_at_every_width_with_its_baseline_and_proxy(tmp_path):
    expanded = load_expanded(str(forecast_study(tmp_path)), None, [])
    by_family = {}
    for v in expanded.variants:
        by_family.setdefault(v.family, []).append(v.config.model.dims.d_model)
    assert by_family == {"llama": [32, 64, 96], "cem_attention": [32, 64, 96]}
    cem = [v for v in expanded.variants if v.family == "cem_attention"]
    llama = {v.key: v for v in expanded.variants if v.family == "llama"}
    for v in cem:  # each width against the Llama of the same width
        assert llama[v.baselines["llama"]].config.model.dims.d_model == v.config.model.dims.d_model
    assert len({v.proxy for v in cem}) == 1 and len(expanded.proxies) == 2  # one proxy per family
    targets = {t.family: t for t in expanded.forecast_targets}
    assert set(targets) == {"llama", "cem_attention"}
    assert {t.config.model.dims.d_model for t in targets.values()} == {256}
    assert {t.config.model.dims.d_mlp for t in targets.values()} == {512}
    assert untrusted_widths(expanded) == [] and trust_warning(expanded) is None


def _ladder_of_two(m):
    m["forecast"]["ladder"] = LADDER[:2]


def _small_target(m):
    m["forecast"]["target"] = {"model.d_model": 64, "model.d_mlp": 128}


def _grid_search(m):
    m["lr_search"] = {"method": "grid", "grid": [1e-3, 4e-3]}


def _standard(m):
    m["base"]["model"]["parametrization"] = "standard"


def _variant_sets_width(m):
    m["variants"][1]["set"] = {"model.attention": "cem", "model.d_model": 64}


def _decreasing(m):
    m["forecast"]["ladder"] = [LADDER[1], LADDER[0], LADDER[2]]


def _target_without_d_mlp(m):
    m["forecast"]["target"] = {"model.d_model": 256}


@pytest.mark.parametrize(
    "change, expected",
    [
        (_ladder_of_two, "forecast.ladder: needs at least 3 widths (a law and its residual), got 2."),
        (
            _small_target,
            "forecast.target.model.d_model: the target (64) must be wider than the ladder's widest width (96)",
        ),
        (_grid_search, "lr_search.method: a forecast trains every width at its proxy's transferred lr*"),
        (_standard, "base.model.parametrization: a forecast needs parametrization: mup"),
        (_variant_sets_width, "variants[1].set.model.d_model: the forecast's ladder sets the width"),
        (_decreasing, "forecast.ladder[1].model.d_model: the ladder's widths must increase"),
        (_target_without_d_mlp, "forecast.target: sets the keys every ladder width sets; missing model.d_mlp."),
    ],
)
def test_a_bad_forecast_is_one_error_line_and_creates_nothing(tmp_path, monkeypatch, capsys, change, expected):
    import yaml

    monkeypatch.chdir(tmp_path)
    path = forecast_study(tmp_path)
    mapping = yaml.safe_load(path.read_text())
    change(mapping)
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    assert main(["study", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: {expected}"), err
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "reports").exists()


def test_a_ladder_width_below_the_trusted_range_is_one_warning_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    narrow = [{"model.d_model": 16, "model.d_mlp": 32}] + LADDER[:2]  # d_head 8, below base d 32
    path = forecast_study(tmp_path, ladder=narrow)
    assert main(["study", str(path), "--dry-run"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, err
    assert "ladder width d_model 16 (d_head 8 < 16; below base_d_model 32)" in warnings[0]
    assert "width d_model 32" not in warnings[0] and "proxy d_model" not in warnings[0]  # only the untrusted


def test_a_transfer_studys_proxy_outside_the_range_is_named(tmp_path):
    search = dict(TRANSFER, proxy={"model.d_model": 16, "model.d_mlp": 32})
    path = write_study(tmp_path, "tr", lr_search=search)
    path.write_text(
        path.read_text().replace("max_seq_len: 32", "max_seq_len: 32\n    parametrization: mup\n    base_d_model: 16")
    )
    expanded = load_expanded(str(path), None, [])
    widths = untrusted_widths(expanded)
    assert [(w.role, w.d_model, w.reasons) for w in widths] == [("proxy", 16, ("d_head 8 < 16",))]
    assert trust_warning(expanded).startswith("warning: ") and "proxy d_model 16 (d_head 8 < 16)" in trust_warning(
        expanded
    )


@pytest.mark.slow
def test_a_forecast_study_runs_the_ladder_at_the_transferred_rate_and_reports_the_forecast(
    tmp_path, corpus, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path = forecast_study(tmp_path, corpus=corpus, seeds=[0, 1])
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = [
        "study",
        str(path),
        "--storage",
        f"sqlite:///{tmp_path}/optuna.db",
        "--tracking-uri",
        uri,
        "--workdir",
        str(tmp_path / "work"),
        "--report-dir",
        str(tmp_path / "reports"),
    ]
    assert main(args) == 0
    from cem_ablate.tracking.readback import read_study

    rungs = read_study(uri, "fc")
    assert len(rungs) == 6  # two families x three widths
    assert {len({t.lr for t in r.trials}) for r in rungs} == {1}  # each at its proxy's lr* only
    report = (tmp_path / "reports" / "fc" / "report.md").read_text()
    assert "## Forecast" in report and "**An extrapolation, not a measurement.**" in report
    assert "| cem_attention vs llama |" in report
