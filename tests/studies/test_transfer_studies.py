"""The transfer study files (docs/design/parametrization.md#s12-parametrization): every paper figure's `transfer` scale,
studies/transfer.yaml and studies/mup_width.yaml validate, and transfer is width transfer
only (same depth and heads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cem_ablate.cli.study_command import load_expanded
from cem_ablate.config import load_yaml
from cem_ablate.study.dry_run import plan, transfer_costs
from cem_ablate.study.estimates import CPU_TRAIN_FLOPS_PER_S
from tests.studies.test_smoke_runs import run_smoke
from tests.studies.test_study_files import LM_FIGURES, path_of

STUDIES = Path(__file__).resolve().parents[2] / "studies"


@pytest.mark.parametrize("name", LM_FIGURES)
def test_each_figure_transfers_from_a_d384_proxy_of_its_own_depth(name):
    expanded = load_expanded(path_of(name), "transfer", [])
    assert expanded.spec.name == f"{name}_transfer" and expanded.spec.statistics.variance == "pooled"
    # 2 seeds with a pooled variance match 3 fixed Welch seeds from 8 compared models on; Fig. 3a
    # compares 6 and keeps 3 (tests/study/test_campaign.py holds every file's design to that)
    assert list(expanded.spec.seeds) == ([0, 1, 2] if name == "fig3a_full_cem_lr" else [0, 1])
    assert expanded.spec.lr_search.method == "transfer"
    proxies = {p.key: p for p in expanded.proxies}
    for v in expanded.variants:
        target, proxy = v.config.model, proxies[v.proxy].config.model
        assert target.parametrization == proxy.parametrization == "mup" and target.base_d_model == 384
        assert proxy.dims.d_model == 384 and target.dims.d_model >= 672
        assert (proxy.dims.n_layers, proxy.dims.n_heads) == (target.dims.n_layers, target.dims.n_heads)
        assert proxy.attention == target.attention and proxy.mlp == target.mlp


@pytest.mark.parametrize("name", LM_FIGURES)
def test_the_twelve_layer_sizes_share_one_proxy(name):
    """108M, 134M and 162M have 12 layers and 12 heads: their d 384 proxies are one model
    (one key, trained once); 86M's 8-layer proxy is another."""
    expanded = load_expanded(path_of(name), "transfer", [])
    by_depth: dict[tuple[str, int], set[str]] = {}
    for v in expanded.variants:
        family = v.name.rsplit(",size=", 1)[0]
        by_depth.setdefault((family, v.config.model.dims.n_layers), set()).add(v.proxy)
    assert all(len(proxies) == 1 for proxies in by_depth.values())
    assert len(expanded.proxies) == len(by_depth)


@pytest.mark.soak  # in CI the campaign's costs: tests/study/test_campaign.py
def test_transfer_costs_less_than_the_calibrated_full_grid():
    """The docs/reproducing.md table's claim, per figure: 3 seeds by transfer < 3 seeds on the grid."""
    for name in LM_FIGURES:
        calibrated = load_expanded(path_of(name), None, ["seeds=[0,1,2]"])
        grid = sum(r.trials * r.estimate.gpu_hours(312.0, 0.4) for r in plan(calibrated))
        three = load_expanded(path_of(name), "transfer", ["seeds=[0,1,2]", "lr_search.proxy_seeds=[0,1,2]"])
        costs = transfer_costs(three, 312.0, 0.4, CPU_TRAIN_FLOPS_PER_S)
        transfer = sum(r["proxy_gpu_hours"] + r["target_gpu_hours"] for r in costs)
        assert 0.2 < transfer / grid < 0.5, name
        assert sum(r["grid_gpu_hours"] for r in costs) == pytest.approx(grid)


@pytest.mark.parametrize(
    "scale",
    [
        "cpu",
        "pilot",
        "pilot_scaled",
        "pilot_scaled_d32_128",
        "pilot_scaled_llama",
        "steps",
        "steps_seed0",
        "smoke",
        "gpu",
        "gpu_seed0",
        "gpu_seeds12_llama_mlp",
        "steps_gpu",
    ],
)
def test_mup_width_scales_validate(scale):
    expanded = load_expanded(str(STUDIES / "mup_width.yaml"), scale, [])
    assert all(v.config.model.parametrization == "mup" for v in expanded.variants)
    if scale == "cpu":
        widths = {v.config.model.dims.d_model for v in expanded.variants}
        assert widths == {32, 64, 128, 256} and len(expanded.spec.lr_search.grid) == 7
    if scale.startswith("pilot_scaled"):  # the cpu scale's own trials (reused by it), one seed
        cpu = {v.name: v.trial_key(1e-3, 0) for v in load_expanded(str(STUDIES / "mup_width.yaml"), "cpu", []).variants}
        assert all(cpu[v.name] == v.trial_key(1e-3, 0) for v in expanded.variants) and expanded.spec.seeds == [0]
    if scale == "steps_seed0":  # the steps scale's own trials
        steps = {
            v.name: v.trial_key(1e-3, 0) for v in load_expanded(str(STUDIES / "mup_width.yaml"), "steps", []).variants
        }
        assert (
            all(steps[v.name] == v.trial_key(1e-3, 0) for v in expanded.variants) and len(steps) == 8
        )  # 3 CEM + the llama baseline, x 2
    readout = "zero" if scale in ("pilot", "gpu", "gpu_seed0", "gpu_seeds12_llama_mlp") else "scaled"
    assert all(v.config.model.dims.mup_readout == readout for v in expanded.variants), scale
    if scale.startswith("gpu") or scale.endswith("gpu"):  # fp32 as on CPU; the partial scales are gpu's own trials
        assert all(v.config.train.precision == "32-true" for v in expanded.variants)
        gpu = {v.name: v.trial_key(1e-3, 1) for v in load_expanded(str(STUDIES / "mup_width.yaml"), "gpu", []).variants}
        if scale != "steps_gpu":
            assert all(gpu[v.name] == v.trial_key(1e-3, 1) for v in expanded.variants)


@pytest.mark.slow
def test_transfer_smoke_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from cem_ablate.tracking.readback import read_study

    uri = run_smoke("transfer", tmp_path)
    assert sorted(len(r.trials) for r in read_study(uri, "transfer_smoke_proxy")) == [2, 2]
    assert sorted(len(r.trials) for r in read_study(uri, "transfer_smoke")) == [1, 1]
    assert "## Transfer" in (tmp_path / "reports" / "transfer_smoke" / "report.md").read_text()


def test_the_scaled_readout_gpu_scales_share_their_trials():
    """gpu_scaled_seed0's trials are gpu_scaled's, and the transfer study's d 64 proxies are the
    width study's d 64 variants (one store holds each trial once), all with the scaled readout."""
    from cem_ablate.study.transfer import proxy_study

    full = {v.name: v for v in load_expanded(str(STUDIES / "mup_width.yaml"), "gpu_scaled", []).variants}
    seed0 = load_expanded(str(STUDIES / "mup_width.yaml"), "gpu_scaled_seed0", [])
    assert seed0.spec.seeds == [0] and len(full) == 20
    assert all(
        v.config.model.dims.mup_readout == "scaled" and v.config.train.precision == "32-true" for v in full.values()
    )
    assert all(full[v.name].trial_key(1e-3, 0) == v.trial_key(1e-3, 0) for v in seed0.variants)
    proxies = proxy_study(load_expanded(str(STUDIES / "transfer.yaml"), "gpu_scaled", []))
    assert list(proxies.spec.lr_search.grid) == list(seed0.spec.lr_search.grid)
    for v in proxies.variants:
        assert v.trial_key(2e-3, 2) == full[f"d64_{v.name.removesuffix('@proxy')}"].trial_key(2e-3, 2)


@pytest.mark.parametrize("study", ["mup_width.yaml", "transfer.yaml"])
def test_every_scale_of_the_mup_studies_validates_under_its_own_name(study):
    """Each of the evidence scales (a new one is added per measurement) validates, every
    variant is under mup but in the std_ scales (standard parametrization's drift, on purpose),
    and no two scales share a study name (a shared name would pool two designs' trials in one
    report)."""
    names = []
    for scale in load_yaml(STUDIES / study)["scale"]:
        expanded = load_expanded(str(STUDIES / study), scale, [])
        assert expanded.variants, scale
        wanted = "standard" if scale.startswith("std_") else "mup"
        assert all(v.config.model.parametrization == wanted for v in expanded.variants), scale
        names.append(expanded.spec.name)
    assert len(names) == len(set(names)) and len(names) >= 10
