"""Several study files as one campaign: each distinct trial counted, priced and trained once."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from cem_ablate.cli.main import main
from cem_ablate.cli.study_command import load_expanded
from cem_ablate.study.campaign import CampaignFile, plan_campaign, seed_design_line
from tests.study.tiny_study import write_study

STUDIES = Path(__file__).resolve().parents[2] / "studies"
FIGURES = sorted(str(p) for p in STUDIES.glob("fig*.yaml"))


def _files(paths, scale=None, sets=()):
    return [CampaignFile(p, load_expanded(p, scale, list(sets))) for p in paths]


def _plan(files, **kwargs):
    return plan_campaign(files, flops_of=lambda v: 1.0, **kwargs)  # counts, not costs


def test_the_figures_grid_campaign_counts_each_trial_key_once():
    """Counted here without the campaign code: every (variant, lr, seed) of every file's grid
    by its trial key."""
    files = _files(FIGURES, sets=["seeds=[0,1,2]"])
    keys = {
        v.trial_key(lr, seed)
        for f in files
        for v in f.expanded.variants
        for lr in f.expanded.spec.lr_search.grid
        for seed in (0, 1, 2)
    }
    plan = _plan(files)
    assert len(plan.trials) == len(keys) < sum(len(plan.asked[f.name]) for f in files)
    assert set(plan.trials) == keys
    # a shared Llama baseline is owned by the first file that asks for it
    llama = next(t for t in plan.trials.values() if t.variant.name == "llama,size=86M")
    assert llama.files[0] == "fig2a_cem_attention" and len(llama.files) == len(FIGURES)


def test_the_figures_transfer_campaign_tunes_each_proxy_once():
    files = _files(FIGURES, "transfer")
    plan = _plan(files)
    proxies = {
        p.trial_key(lr, seed)
        for f in files
        for p in f.expanded.proxies
        for lr in f.expanded.spec.lr_search.grid
        for seed in (0, 1)
    }
    targets = {(v.variant_key, seed) for f in files for v in f.expanded.variants for seed in f.expanded.spec.seeds}
    by_role = {role: [t for t in plan.trials.values() if t.role == role] for role in ("proxy", "target")}
    assert {t.identity for t in by_role["proxy"]} == proxies
    assert {(t.variant.variant_key, t.seed) for t in by_role["target"]} == targets
    assert len(by_role["target"]) == len(targets)
    # the proxies come first in the queue; a family's 86M has its own (8 layers), and its
    # 108M, 134M and 162M share one (12 layers)
    assert [t.role for t in plan.trials.values()] == ["proxy"] * len(proxies) + ["target"] * len(targets)
    families = {v.variant_key for f in files for v in f.expanded.variants if v.name.endswith(",size=86M")}
    assert len({t.variant.variant_key for t in by_role["proxy"]}) == 2 * len(families)


def test_the_figures_calibrated_campaign_fits_a_thousand_a100_hours():
    """Every figure file's `transfer` design is held to 3 fixed Welch seeds (false-positive rate
    and power, simulated) and the campaign, each distinct trial once, fits 1,000 A100-hours at
    40% MFU (the engine's own FLOP estimates)."""
    from cem_ablate.study.campaign_dry_run import campaign_cost
    from cem_ablate.study.estimates import GpuRate

    plan = plan_campaign(_files(FIGURES, "transfer"))
    assert {name for line in plan.designs for name in line.files} == {f.name for f in plan.files}
    assert all(line.meets and line.design.pooled for line in plan.designs)
    cost = campaign_cost(plan, GpuRate(312.0, 0.4))
    assert not cost.sequential and cost.worst == pytest.approx(cost.expected) and cost.worst <= 1000.0 < cost.alone


def test_sequential_seeds_expected_case_weights_the_seeds_past_min(tmp_path):
    seeds = "seeds={min: 2, max: 4, until: resolved}"
    a = write_study(tmp_path, name="a")
    b = write_study(
        tmp_path,
        name="b",
        variants=[{"name": "llama"}, {"name": "cem_mlp", "set": {"model.mlp": "cem"}}],
        baselines={"llama": {"model.mlp": "llama"}},
    )
    plan = _plan(_files([str(a), str(b)], sets=[seeds]))
    by_seed = {}
    for t in plan.trials.values():
        by_seed.setdefault((t.variant.name, t.seed), set()).add(t.trained)
    assert all(by_seed[(name, s)] == {1.0} for name in ("llama", "cem_attention", "cem_mlp") for s in (0, 1))
    llama, cem = by_seed[("llama", 2)].pop(), by_seed[("cem_attention", 2)].pop()
    assert 0 < cem < llama < 1  # Llama is in two comparisons: either unresolved buys its seed
    assert by_seed[("cem_attention", 3)].pop() < cem  # a fourth seed only where a third did not resolve
    (line,) = plan.designs
    assert line.paired and line.expected_seeds > 3  # at the Δ 3 fixed seeds detect, 2..4 costs more


def test_a_sequential_design_is_held_against_three_fixed_seeds_by_simulation():
    from cem_ablate.analysis.decision import Design

    meets = seed_design_line(Design.sequential(2, 4), paired=False)
    assert meets.false_positive <= meets.reference_false_positive and meets.power >= meets.reference_power
    assert meets.meets and "as calibrated and as powerful or better" in meets.text()
    short = seed_design_line(Design.sequential(2, 3), paired=False)
    assert short.power < short.reference_power and "less powerful" in short.text() and not short.meets


@pytest.mark.parametrize("groups, meets", [(6, False), (8, True), (24, True)])
def test_two_seeds_with_a_pooled_variance_are_held_against_three_fixed_seeds(groups, meets):
    """Two seeds per point with the variance pooled over `groups` points at α 0.034: its
    false-positive rate is that of 3 fixed Welch seeds at α 0.05 (simulated), and its power
    is theirs or better from 8 points on (noncentral t with groups × 1 df)."""
    from cem_ablate.analysis.decision import Design

    line = seed_design_line(Design.fixed(2, 0.034, pooled=True), paired=False, groups=groups)
    assert abs(line.false_positive - 0.034) < 0.005 and abs(line.reference_false_positive - 0.034) < 0.005
    assert line.meets is meets and (line.power >= line.reference_power) is meets
    assert f"pooled t over {groups} points" in line.text()


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--set", "lr_search={method: tpe, low: 1.0e-3, high: 4.0e-3, n_trials: 2}"], "draws its learning rates"),
        (["SAME"], "also"),
        (["--scale", "x", "--scale", "y"], "a run takes one scale"),
    ],
)
def test_bad_campaigns_are_one_error_line_and_create_nothing(tmp_path, monkeypatch, capsys, extra, says):
    monkeypatch.chdir(tmp_path)
    a, b = write_study(tmp_path, name="a"), write_study(tmp_path, name="b")
    args = ["study", str(a), str(b)] + [str(a) if e == "SAME" else e for e in extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and says in err[0]
    assert not (tmp_path / "mlruns").exists()


def _complete(root: Path) -> dict[str, list]:
    """Optuna study name -> its complete trials."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{root / 'mlruns' / 'optuna.db'}")
    return {
        name: [
            t
            for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.COMPLETE
        ]
        for name in optuna.get_all_study_names(storage)
    }


@pytest.mark.slow
def test_a_campaign_of_two_files_trains_their_shared_baseline_once(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    a = write_study(tmp_path, name="a", corpus=corpus)
    b = write_study(
        tmp_path,
        name="b",
        corpus=corpus,
        variants=[{"name": "llama"}, {"name": "cem_mlp", "set": {"model.mlp": "cem"}}],
        baselines={"llama": {"model.mlp": "llama"}},
    )
    assert main(["study", str(a), str(b), "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "distinct: 6 trials (6 grid) of 8 the files ask for" in out
    assert main(["study", str(a), str(b), "--workers", "2", "--report-dir", str(tmp_path / "reports")]) == 0
    trials = [t for ts in _complete(tmp_path).values() for t in ts]
    trained = [t.user_attrs["trial_key"] for t in trials if "reused_from" not in t.user_attrs]
    assert len(trials) == 8 and len(trained) == len(set(trained)) == 6  # Llama's 2 trials trained once
    assert {name.split("/")[0] for name in _complete(tmp_path)} == {"a", "b"}
    assert all((tmp_path / "reports" / name / "report.md").exists() for name in ("a", "b"))
    capsys.readouterr()
    assert main(["study", str(a), str(b), "--no-report"]) == 0  # a rerun trains nothing
    assert "every trial is already done" in capsys.readouterr().out
    assert sorted(len(ts) for ts in _complete(tmp_path).values()) == [2, 2, 2, 2]
    assert main(["study", str(a), str(b), "--dry-run"]) == 0
    assert "storage: 6 of the 6 trials are settled" in " ".join(capsys.readouterr().out.split())


def test_the_budget_line_says_by_how_much_a_campaign_misses():
    from cem_ablate.study.campaign_dry_run import CampaignCost, budget_line
    from cem_ablate.study.estimates import GpuRate

    cost = CampaignCost(alone=2173.0, worst=1415.0, expected=1415.0, by_role={}, sequential=False)
    line = budget_line(cost, GpuRate(312.0, 0.4), 1000.0)
    assert "misses it by 415 GPU-hours" in line and "1.42x" in line and "56.6% MFU of 312 TFLOP/s" in line
    assert "fits" in budget_line(cost, GpuRate(312.0, 0.4), 2000.0)


@pytest.mark.slow
@pytest.mark.soak  # in CI the grid campaign: test_a_campaign_of_two_files_trains_their_shared_baseline_once
def test_a_transfer_campaign_tunes_and_trains_a_shared_model_once(tmp_path, corpus, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from tests.study.test_transfer import TRANSFER

    paths = []
    for name, variants in (
        ("tr", None),
        ("tr2", [{"name": "llama"}, {"name": "cem_mlp", "set": {"model.mlp": "cem"}}]),
    ):
        extra = {"variants": variants, "baselines": {"llama": {"model.mlp": "llama"}}} if variants else {}
        path = write_study(tmp_path, name, corpus=corpus, lr_search=TRANSFER, **extra)
        path.write_text(
            path.read_text().replace(
                "max_seq_len: 32", "max_seq_len: 32\n    parametrization: mup\n    base_d_model: 16"
            )
        )
        paths.append(str(path))
    assert main(["study", *paths, "--no-report"]) == 0
    complete = _complete(tmp_path)
    assert sorted(name.split("/")[0] for name in complete) == [
        "tr",
        "tr",
        "tr2",
        "tr2",
        "tr2_proxy",
        "tr2_proxy",
        "tr_proxy",
        "tr_proxy",
    ]
    trials = [t for ts in complete.values() for t in ts]
    trained = [t.user_attrs["trial_key"] for t in trials if "reused_from" not in t.user_attrs]
    # Llama's proxy (2 lrs) and its target (1 lr) are asked for by both files and trained once
    assert len(trials) == 12 and len(trained) == len(set(trained)) == 9
    assert main(["study", *paths, "--no-report"]) == 0  # a rerun trains nothing
    assert sum(len(ts) for ts in _complete(tmp_path).values()) == 12
