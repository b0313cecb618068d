"""lr_search method transfer: proxies validated with the study, targets at their proxy's lr*,
a real two-phase run (SQLite Optuna, SQLite MLflow) whose report says what was transferred."""

from __future__ import annotations

import dataclasses

import pytest

from cem_ablate.cli.main import main
from cem_ablate.cli.study_command import load_expanded
from cem_ablate.config.errors import ConfigError
from cem_ablate.study.transfer import ProxyOptimum, proxy_study, round_lr, target_study
from cem_ablate.study.trials import trial_slots
from tests.study.tiny_study import write_study

TRANSFER = {"method": "transfer", "proxy": {"model.d_model": 16, "model.d_mlp": 32}, "grid": [1e-3, 4e-3]}


def _mup_study(tmp_path, corpus, **extra):
    path = write_study(tmp_path, "tr", corpus=corpus, lr_search=TRANSFER, **extra)
    text = path.read_text().replace(
        "max_seq_len: 32", "max_seq_len: 32\n    parametrization: mup\n    base_d_model: 16"
    )
    path.write_text(text)
    return path


def test_each_variant_and_baseline_gets_its_proxy(tmp_path, corpus):
    expanded = load_expanded(str(_mup_study(tmp_path, corpus)), None, [])
    assert len(expanded.proxies) == len(expanded.variants) == 2
    for v in expanded.variants:
        proxy = next(p for p in expanded.proxies if p.key == v.proxy)
        assert proxy.role == "proxy" and proxy.config.model.dims.d_model == 16
        assert v.config.model.dims.d_model == 32 and v.lr_grid is None
    cem = next(v for v in expanded.variants if v.name == "cem_attention")
    cem_proxy = next(p for p in expanded.proxies if p.key == cem.proxy)
    llama = next(v for v in expanded.variants if v.name == "llama")
    assert cem_proxy.baselines == {"llama": llama.proxy}  # the proxies are compared like their targets


def test_targets_train_at_their_proxys_rounded_lr_star_only(tmp_path, corpus):
    expanded = load_expanded(str(_mup_study(tmp_path, corpus, seeds=[0, 1])), None, [])
    proxies = proxy_study(expanded)
    assert proxies.spec.name == "tr_proxy" and proxies.spec.lr_search.method == "grid"
    assert {
        len(trial_slots(v.lr_search(proxies.spec.lr_search), list(proxies.spec.seeds))) for v in proxies.variants
    } == {4}  # 2 lrs x 2 seeds
    optima = {
        p.key: ProxyOptimum(p.key, lr, round_lr(lr), None, None)
        for p, lr in zip(expanded.proxies, (1.23456e-3, 3.0e-3))
    }
    targets = target_study(expanded, optima)
    for v in targets.variants:
        search = v.lr_search(targets.spec.lr_search)
        assert search.grid == [optima[v.proxy].lr]
        assert [s.lr for s in trial_slots(search, [0, 1])] == [optima[v.proxy].lr] * 2
    assert round_lr(1.23456e-3) == 1.23e-3
    assert targets.study_hash != dataclasses.replace(targets, variants=expanded.variants).study_hash


@pytest.mark.parametrize(
    "proxy, where",
    [
        ({"model.d_modl": 16}, "lr_search.proxy.model.d_modl"),
        ({"train.lr": 1e-3}, "lr_search.proxy.train.lr"),
        ({"optimizer.lr": 1e-3}, "lr_search.proxy.optimizer.lr"),
        ({}, "lr_search.proxy"),
    ],
)
def test_a_bad_proxy_key_is_one_error_naming_it(tmp_path, corpus, proxy, where):
    path = write_study(tmp_path, "bad", corpus=corpus, lr_search={**TRANSFER, "proxy": proxy})
    with pytest.raises(ConfigError) as err:
        load_expanded(str(path), None, [])
    assert where in str(err.value)


def test_proxy_only_with_transfer(tmp_path, corpus):
    path = write_study(
        tmp_path, "bad", corpus=corpus, lr_search={"method": "grid", "grid": [1e-3], "proxy": {"model.d_model": 16}}
    )
    with pytest.raises(ConfigError, match="lr_search.proxy"):
        load_expanded(str(path), None, [])


def test_dry_run_shows_proxy_target_and_full_grid_cost(tmp_path, corpus, capsys):
    path = _mup_study(tmp_path, corpus, seeds=[0, 1, 2])
    assert main(["study", str(path), "--dry-run", "--storage", f"sqlite:///{tmp_path}/none.db"]) == 0
    out = capsys.readouterr().out
    assert "proxy trials" in out and "target trials" in out and "full grid trials" in out
    assert "transfer 12 proxy + 6 target trials" in out and "full grid 12 trials" in out
    assert not (tmp_path / "none.db").exists()  # a dry run creates nothing
    assert "note: proxies at" not in out  # base_d_model 16 = the proxy's width


def test_dry_run_notes_a_proxy_below_its_base(tmp_path, corpus, capsys):
    path = _mup_study(tmp_path, corpus)
    path.write_text(path.read_text().replace("base_d_model: 16", "base_d_model: 64"))
    assert main(["study", str(path), "--dry-run", "--storage", f"sqlite:///{tmp_path}/none.db"]) == 0
    assert "note: proxies at d_model 16 with base_d_model 64: the transfer evidence" in capsys.readouterr().out


@pytest.mark.slow
def test_a_transfer_study_runs_both_phases_and_reports_the_transfer(tmp_path, corpus, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _mup_study(tmp_path, corpus)
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

    proxies = read_study(uri, "tr_proxy")
    assert sorted(len(r.trials) for r in proxies) == [2, 2]  # the full grid
    targets = {r.name: r for r in read_study(uri, "tr")}
    stars = {r.key: r.lr_star for r in proxies}
    expanded = load_expanded(str(path), None, [])
    for v in expanded.variants:
        (trial,) = targets[v.name].trials  # one lr, one seed
        assert trial.status == "finished" and trial.lr == round_lr(stars[v.proxy])
    report = (tmp_path / "reports" / "tr" / "report.md").read_text()
    assert "## Transfer" in report and "(transferred)" in report and "tr_proxy" in report
    assert "| interval high/low |" in report  # one seed: no interval, hence "-" and no note
    assert "poorly determined" not in report
    # a rerun trains nothing: both phases' trials are done
    assert main(args + ["--no-report"]) == 0
    assert sorted(len(r.trials) for r in read_study(uri, "tr_proxy")) == [2, 2]


@pytest.mark.parametrize("proxy_code", [1, 130])  # unfinished, interrupted (Ctrl-C, a lease's deadline)
def test_no_lr_is_transferred_from_an_unfinished_proxy_grid(tmp_path, corpus, monkeypatch, capsys, proxy_code):
    """Seen on a GPU lease cut short: the grid runs low to high, so a partial grid's lr* sits at
    its high edge; the targets must not train at it. Here the proxy phase ends with its trials
    still queued in a real store (the coordinator queues them, then stops as if interrupted)."""
    from cem_ablate.study import coordinator
    from cem_ablate.study.progress import snapshot
    from cem_ablate.study.session import StudySession

    calls = []

    def stopped_early(expanded, settings, workers, echo=print):
        calls.append(expanded.spec.name)
        session = StudySession(expanded, settings)
        session.prepare(echo)  # queued, none run
        return coordinator.StudyOutcome(proxy_code, snapshot(session).complete)  # as run_study_outcome reads it

    monkeypatch.setattr(coordinator, "run_study_outcome", stopped_early)
    monkeypatch.setattr(coordinator, "run_study", lambda *a, **k: calls.append("target") or 0)
    monkeypatch.chdir(tmp_path)
    path = _mup_study(tmp_path, corpus)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code = main(
        [
            "study",
            str(path),
            "--storage",
            f"sqlite:///{tmp_path}/optuna.db",
            "--tracking-uri",
            uri,
            "--workdir",
            str(tmp_path / "work"),
            "--no-report",
        ]
    )
    assert code == proxy_code and calls == ["tr_proxy"]  # phase 2 never started
    out = capsys.readouterr().out
    assert "no lr* is transferred from an unfinished proxy grid" in out and "phase 2" not in out
