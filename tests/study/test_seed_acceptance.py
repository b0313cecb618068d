"""On a tiny real study, the report's seed statistics equal an
independent computation from the trials' final metrics read from MLflow."""

import math
from collections import defaultdict

import numpy as np
import optuna
import pytest
from scipy import stats
from scipy.interpolate import Akima1DInterpolator

from cem_ablate.cli.main import main
from cem_ablate.reporting.report import build_comparisons, build_rows
from cem_ablate.reporting.seed_report import decimals
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.comparison_columns import interval_text
from cem_ablate.tracking.readback import read_study
from cem_ablate.tracking.store import make_client
from tests.study.tiny_study import write_study

GRID = [1e-3, 4e-3]
SEEDS = [0, 1, 2]


def independent(root, study):
    """{variant: {lr: {seed: objective}}} from the MLflow children, and the parents."""
    client = make_client(f"sqlite:///{root / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(study)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = {r.info.run_id: r for r in runs if r.data.tags.get(T.KIND) == "variant"}
    values = defaultdict(lambda: defaultdict(dict))
    for r in runs:
        if r.data.tags.get(T.KIND) == "trial" and r.data.tags.get(T.STATUS) == "finished":
            name = parents[r.data.tags[T.PARENT]].info.run_name
            values[name][float(r.data.tags["lr"])][int(r.data.tags["seed"])] = r.data.metrics["objective"]
    return experiment, {p.info.run_name: p for p in parents.values()}, values


def akima_lr_star(by_lr):
    lrs = sorted(by_lr)
    means = [np.mean(list(by_lr[lr].values())) for lr in lrs]
    xs = np.linspace(math.log2(lrs[0]), math.log2(lrs[-1]), 2001)
    ys = Akima1DInterpolator(np.log2(lrs), means)(xs)
    return 2.0 ** xs[int(np.argmin(ys))]


@pytest.mark.soak
def test_report_statistics_equal_an_independent_computation(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    path = write_study(tmp_path, name="seeds3", grid=GRID, corpus=corpus, seeds=SEEDS)
    assert main(["study", str(path)]) == 0
    out = capsys.readouterr().out
    experiment, parents, values = independent(tmp_path, "seeds3")
    assert sorted(values) == ["cem_attention", "llama"]
    assert all(sorted(values[v][lr]) == SEEDS for v in values for lr in GRID)

    records = read_study(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", "seeds3")
    rows = {r.name: r for r in build_rows(records)}
    report = (tmp_path / "reports" / "seeds3" / "report.md").read_text()
    for name, by_lr in values.items():
        statistics = rows[name].statistics
        assert statistics.objective == "test perplexity"
        for row in statistics.stats.by_lr:
            xs = np.array([by_lr[row.lr][s] for s in SEEDS])
            mean, std = xs.sum() / len(xs), math.sqrt(((xs - xs.mean()) ** 2).sum() / (len(xs) - 1))
            assert row.n == 3
            assert row.mean == pytest.approx(mean, rel=1e-6) and row.std == pytest.approx(std, rel=1e-6)
            assert f"{mean:.4f} ± {std:.4f}" in report
            metrics = parents[name].data.metrics  # the parent carries the same aggregates for the UI
            assert metrics[f"lr_{row.lr:g}/mean"] == pytest.approx(mean, rel=1e-6)
            assert metrics[f"lr_{row.lr:g}/std"] == pytest.approx(std, rel=1e-6)
        optimum = statistics.stats.optimum
        assert optimum.lr_star == pytest.approx(akima_lr_star(by_lr), rel=1e-6)
        if optimum.lr_interval is not None:  # printed only where its coverage at n seeds was checked
            assert optimum.lr_interval.contains(optimum.lr_star)
        if optimum.objective_interval is not None:
            assert optimum.objective_interval.contains(optimum.objective_star)

    # Every comparison of the report, recomputed with scipy from the children's final
    # metrics: the test the report names (CEM attention and Llama start from different
    # weights: Welch), Holm by hand over the report's family, verdicts from Holm p at α.
    comparisons = build_comparisons(records)
    assert comparisons.rows and {c.test.decision.test for c in comparisons.rows} == {"Welch t"}
    assert parents["cem_attention"].data.tags[T.PAIRING_PREFIX + "llama"] == "unpaired"
    raw = []
    for c in comparisons.rows:
        v = [values[c.variant][c.test.lr_variant][s] for s in SEEDS]
        b = [values[c.baseline][c.test.lr_baseline][s] for s in SEEDS]
        result = stats.ttest_ind(v, b, equal_var=False)
        ci = result.confidence_interval(0.95)
        d = c.test.decision
        assert d.delta == pytest.approx(np.mean(v) - np.mean(b), rel=1e-6, abs=1e-9)
        assert d.p == pytest.approx(result.pvalue, rel=1e-6)
        assert (d.low, d.high) == pytest.approx((ci.low, ci.high), rel=1e-6)
        assert d.n_variant == d.n_baseline == 3
        raw.append(result.pvalue)
        line = next(row for row in report.splitlines() if row.startswith(f"| {c.variant} | {c.baseline} | {c.test.at}"))
        places = decimals(d.delta, ci.low, ci.high)  # one rounding for Δ and its interval
        assert f"| {d.delta:+.{places}f} [{ci.low:+.{places}f}, {ci.high:+.{places}f}] | Welch t | 3 vs 3 |" in line, (
            line
        )
    m, order = len(raw), np.argsort(raw)
    holm = np.minimum(1.0, np.maximum.accumulate([(m - i) * raw[j] for i, j in enumerate(order)]))
    for i, j in enumerate(order):
        d = comparisons.rows[j].test.decision
        assert d.p_holm == pytest.approx(holm[i], rel=1e-6)
        expected = "unresolved" if holm[i] > 0.05 else ("better" if d.delta < 0 else "worse")
        assert d.verdict == expected
        line = next(
            row
            for row in report.splitlines()
            if row.startswith(
                f"| {comparisons.rows[j].variant} | {comparisons.rows[j].baseline} | {comparisons.rows[j].test.at}"
            )
        )
        assert line.endswith(f"| {d.p:.3g} | {d.p_holm:.3g} | {expected} |"), line
    headline = next(c for c in comparisons.rows if c.test.at == "baseline lr*")
    cem = parents["cem_attention"]
    assert cem.data.tags[T.VERDICT_PREFIX + "llama"] == headline.test.decision.verdict
    assert cem.data.metrics["delta_vs_llama"] == pytest.approx(headline.test.decision.delta, rel=1e-6)
    assert cem.data.metrics["delta_vs_llama/p_holm"] == pytest.approx(headline.test.decision.p_holm, rel=1e-6)
    assert "Δ vs baseline" in out and headline.test.decision.verdict in out
    # The same answer in the parent's short display columns (4 significant
    # digits), and the report on every parent's page
    d = headline.test.decision
    assert {k: cem.data.metrics[k] for k in ("Δ llama", "Holm p llama", "p llama", "lr opt")} == {
        "Δ llama": float(f"{d.delta:.4g}"),
        "Holm p llama": float(f"{d.p_holm:.4g}"),
        "p llama": float(f"{d.p:.4g}"),
        "lr opt": float(f"{rows['cem_attention'].statistics.stats.optimum.lr_star:.4g}"),
    }
    assert (cem.data.tags["verdict llama"], cem.data.tags["CI llama"]) == (d.verdict, interval_text(d.low, d.high))
    client = make_client(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    children = client.search_runs([experiment.experiment_id], f"tags.`{T.KIND}` = 'trial'", max_results=1000)
    assert len(children) == 2 * len(GRID) * len(SEEDS)
    for child in children:  # lr and seed as params: MLflow's Compare plots them against `objective`
        params = child.data.params
        assert (float(params["train.lr"]), int(params["train.seed"])) == (
            float(child.data.tags["lr"]),
            int(child.data.tags["seed"]),
        )
        assert "objective" in child.data.metrics
    for parent in parents.values():
        logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
        assert {"report/report.md", "report/ppl_vs_lr.png", "report/ppl_vs_params.png"} <= logged, logged

    # The dry run of the same file reads the spread of these trials: the 80%-power Δ in perplexity too
    assert main(["study", str(path), "--dry-run"]) == 0
    dry = " ".join(capsys.readouterr().out.split())
    side = math.sqrt(
        np.mean([np.var(list(by_seed.values()), ddof=1) for by_lr in values.values() for by_seed in by_lr.values()])
    )  # equal n: the pooled variance is the mean
    assert f"test perplexity at the std {side:.3g} of 12 finished trials" in dry, dry

    # MLflow: the training view's kind, MLflow's source tags, system metrics of trials
    assert experiment.tags[T.EXPERIMENT_KIND] == T.TRAINING_KIND
    client = make_client(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    children = [
        r
        for r in client.search_runs([experiment.experiment_id], max_results=1000)
        if r.data.tags.get(T.KIND) == "trial"
    ]
    for run in list(parents.values()) + children:
        assert len(run.data.tags["mlflow.source.git.commit"]) == 40 and run.data.tags["mlflow.source.type"] == "LOCAL"
    assert any(k.startswith("system/") for c in children for k in c.data.metrics)


def test_sequential_seeds_add_a_seed_only_while_unresolved(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    seeds = {"min": 2, "max": 3, "until": "resolved"}
    path = write_study(tmp_path, name="seq", grid=[2e-3], corpus=corpus, seeds=seeds)
    assert main(["study", str(path), "--no-report"]) == 0
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'mlruns' / 'optuna.db'}")
    finished = {}
    for name in optuna.get_all_study_names(storage):
        study = optuna.load_study(study_name=name, storage=storage)
        finished[study.user_attrs["variant"]] = {
            t.params["seed"]: t.value for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE
        }
    v, b = finished["cem_attention"], finished["llama"]
    assert sorted(v) == sorted(b)  # the pair moves together
    # Not paired (different attention, different initial weights): Welch; two looks
    # (2 and 3 seeds), each tested at α / 2.
    p = stats.ttest_ind([v[0], v[1]], [b[0], b[1]], equal_var=False).pvalue
    resolved_at_two = p <= 0.05 / 2
    assert sorted(v) == ([0, 1] if resolved_at_two else [0, 1, 2])
    if not resolved_at_two:
        assert "a Δ is unresolved, now seeds 0..2 (max 3)" in capsys.readouterr().out


def test_a_pooled_study_reports_the_pooled_t_from_the_trials_in_mlflow(tmp_path, corpus, monkeypatch, capsys):
    """`statistics.variance: pooled` end to end, 3 variants x 2 seeds at one rate: every Δ the
    report prints is the t-test with the variance pooled over the three variants, recomputed here
    from the trials' final metrics in MLflow (scipy's ANOVA gives the mean square)."""
    monkeypatch.chdir(tmp_path)
    variants = [
        {"name": "llama"},
        {"name": "cem_attention", "set": {"model.attention": "cem"}},
        {"name": "cem_mlp", "set": {"model.mlp": "cem"}},
    ]
    path = write_study(
        tmp_path,
        name="pooled",
        grid=[2e-3],
        corpus=corpus,
        seeds=[0, 1],
        variants=variants,
        statistics={"variance": "pooled"},
        baselines={"llama": {"model.attention": "llama", "model.mlp": "llama"}},
    )
    assert main(["study", str(path)]) == 0
    capsys.readouterr()
    _, _, values = independent(tmp_path, "pooled")
    groups = {name: [by_lr[2e-3][s] for s in (0, 1)] for name, by_lr in values.items()}
    within = sum(((np.asarray(g) - np.mean(g)) ** 2).sum() for g in groups.values()) / 3  # 3 x (2 - 1) df
    everything = np.concatenate(list(groups.values()))
    between = sum(2 * (np.mean(g) - everything.mean()) ** 2 for g in groups.values()) / 2
    assert between / within == pytest.approx(stats.f_oneway(*groups.values()).statistic, rel=1e-6)
    comparisons = build_comparisons(read_study(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", "pooled"))
    report = (tmp_path / "reports" / "pooled" / "report.md").read_text()
    assert len(comparisons.rows) == 2
    for c in comparisons.rows:
        d = c.test.decision
        delta = np.mean(groups[c.variant]) - np.mean(groups["llama"])
        t = delta / math.sqrt(within * (1 / 2 + 1 / 2))
        assert d.test == "pooled t" and d.delta == pytest.approx(delta, rel=1e-6, abs=1e-9)
        assert d.p == pytest.approx(2 * stats.t.sf(abs(t), 3), rel=1e-6)
        line = next(row for row in report.splitlines() if row.startswith(f"| {c.variant} | llama |"))
        assert "| pooled t | 2 vs 2 |" in line, line
