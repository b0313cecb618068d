"""Whole studies through the real engine, real SQLite Optuna storage and MLflow store."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import optuna
import pytest
from optuna.trial import TrialState

from cem_ablate.cli.main import main
from cem_ablate.study.optuna_storage import trial_id_of
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.store import make_client
from tests.study.tiny_study import write_study


def optuna_trials(root):
    storage = optuna.storages.RDBStorage(f"sqlite:///{root / 'mlruns' / 'optuna.db'}")
    return {
        name: optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        for name in optuna.get_all_study_names(storage)
    }


def mlflow_runs(root, study):
    client = make_client(f"sqlite:///{root / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(study)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get(T.KIND) == "variant"]
    children = [r for r in runs if r.data.tags.get(T.KIND) == "trial"]
    return parents, children


def assert_each_point_finished_once(root, study, n_variants, grid):
    trials = optuna_trials(root)
    assert len(trials) == n_variants
    for name, ts in trials.items():
        done = Counter(t.user_attrs["slot"] for t in ts if t.state == TrialState.COMPLETE)
        assert sorted(done) == sorted(f"lr={lr!r},seed=0" for lr in grid), name
        assert set(done.values()) == {1}, name  # no grid point trained twice
    parents, children = mlflow_runs(root, study)
    assert len(parents) == n_variants
    keys = Counter(r.data.tags[T.TRIAL_KEY] for r in children)
    assert len(keys) == n_variants * len(grid) and set(keys.values()) == {1}  # one child per finished trial
    parent_ids = {p.info.run_id for p in parents}
    assert {c.data.tags[T.PARENT] for c in children} == parent_ids
    return trials, parents, children


def test_a_study_finishes_with_a_diverging_lr_and_reports(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = [1e-3, 4e-3, 1e8]  # 1e8 blows the loss up within a few steps
    path = write_study(tmp_path, grid=grid, corpus=corpus)
    assert main(["study", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[ 6/6] 4 finished, 2 diverged, 0 failed" in out

    trials = optuna_trials(tmp_path)
    for ts in trials.values():
        states = {t.params["lr"]: (t.state, t.user_attrs.get("status")) for t in ts}
        assert states[1e-3] == (TrialState.COMPLETE, "finished")
        assert states[1e8] == (TrialState.FAIL, "diverged")
        assert "not finite" in next(t for t in ts if t.params["lr"] == 1e8).user_attrs["reason"]

    parents, children = mlflow_runs(tmp_path, "tiny")
    assert sorted(p.info.run_name for p in parents) == ["cem_attention", "llama"]
    for p in parents:
        m = p.data.metrics
        assert 1e-3 <= m["lr_akima"] <= 4e-3 and m["ppl_akima"] > 1  # the diverged point is not in the fit
        assert m["trials_diverged"] == 1 and m["trials_finished"] == 2 and m["params_total"] > 0
        assert p.data.tags[T.AKIMA_EDGE] in ("low", "high", "none") and p.info.status == "FINISHED"
        assert p.data.params["variant"] == p.info.run_name
    cem = next(p for p in parents if p.info.run_name == "cem_attention")
    llama = next(p for p in parents if p.info.run_name == "llama")
    assert cem.data.tags[T.BASELINE_PREFIX + "llama"] == llama.data.tags[T.VARIANT_KEY]
    assert cem.data.params["model.attention.name"] == "cem"
    diverged = [c for c in children if c.data.tags[T.STATUS] == "diverged"]
    assert len(diverged) == 2 and all(float(c.data.tags["lr"]) == 1e8 for c in diverged)
    finished = [c for c in children if c.data.tags[T.STATUS] == "finished"]
    assert len(finished) == 4 and all(c.data.metrics["test_ppl"] > 1 for c in finished)

    # the report: table on stdout, markdown and both figures on disk
    assert "cem_attention" in out and "Δ vs baseline" in out
    report = (tmp_path / "reports" / "tiny" / "report.md").read_text()
    assert "| cem_attention |" in report and "diverged" in report
    assert (tmp_path / "reports" / "tiny" / "ppl_vs_lr.png").stat().st_size > 10_000
    assert (tmp_path / "reports" / "tiny" / "ppl_vs_params.png").stat().st_size > 10_000

    # rerunning a finished study trains nothing and creates no runs
    assert main(["study", str(path), "--no-report"]) == 0
    assert "every trial is already done" in capsys.readouterr().out
    assert sum(len(ts) for ts in optuna_trials(tmp_path).values()) == 6
    assert len(mlflow_runs(tmp_path, "tiny")[1]) == 6


def _study_process(path, cwd, *args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "cem_ablate.cli.main", "study", str(path), "--no-report", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_running_trial_after_a_complete_one(root, proc, timeout=600):  # a hang guard, not a bound
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if (root / "mlruns" / "optuna.db").exists():
            try:
                states = [t.state for ts in optuna_trials(root).values() for t in ts]
            except Exception:  # noqa: BLE001  the schema is being created
                states = []
            if TrialState.COMPLETE in states and TrialState.RUNNING in states:
                return
        time.sleep(0.2)
    raise AssertionError("the study never got to a running trial")


@pytest.mark.slow
def test_kill_minus_9_mid_trial_then_rerun_finishes_every_point_once(tmp_path, corpus, monkeypatch):
    grid = [1e-3, 4e-3]
    path = write_study(tmp_path, name="killed", grid=grid, max_steps=12, corpus=corpus)
    # The killed trial is found by its dead pid. Under the default grace period (60 s) a slow
    # rerun could find its heartbeat stale first and fail it without the "killed" status.
    grace = ["--grace", "3600"]
    proc = _study_process(path, tmp_path, *grace)
    _wait_for_running_trial_after_a_complete_one(tmp_path, proc)
    proc.send_signal(signal.SIGKILL)  # a trial was claimed at most 0.2 s ago: it is mid-trial
    proc.wait()
    killed = [t for ts in optuna_trials(tmp_path).values() for t in ts if t.state == TrialState.RUNNING]
    assert len(killed) == 1

    monkeypatch.chdir(tmp_path)
    assert main(["study", str(path), "--no-report", *grace]) == 0
    trials, parents, children = assert_each_point_finished_once(tmp_path, "killed", 2, grid)
    same_variant = next(ts for ts in trials.values() if any(trial_id_of(t) == trial_id_of(killed[0]) for t in ts))
    again = next(t for t in same_variant if trial_id_of(t) == trial_id_of(killed[0]))
    assert again.state == TrialState.FAIL and again.user_attrs["status"] == "killed"
    retried = [
        t for t in same_variant if t.user_attrs["slot"] == again.user_attrs["slot"] and t.state == TrialState.COMPLETE
    ]
    assert len(retried) == 1 and retried[0].user_attrs["attempt"] == 2
    assert all(c.info.status == "FINISHED" for c in children)  # the killed attempt's child was reused


@pytest.mark.slow
@pytest.mark.soak
def test_two_workers_share_one_storage_without_training_a_point_twice(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = [1e-3, 2e-3, 4e-3]
    # trials long enough (~1 s) that the second worker has work when it is up: at the default 4
    # steps one worker once finished all six while the other was still importing torch
    path = write_study(tmp_path, name="pair", grid=grid, max_steps=60, corpus=corpus)
    assert main(["study", str(path), "--workers", "2", "--no-report"]) == 0
    assert "2 workers, 1 threads each" in capsys.readouterr().out
    trials, _, _ = assert_each_point_finished_once(tmp_path, "pair", 2, grid)
    every = [t for ts in trials.values() for t in ts]
    assert len(every) == 6  # not even a duplicate that was caught and dropped
    assert len({t.user_attrs["worker"]["pid"] for t in every}) == 2
    logs = sorted((tmp_path / "mlruns" / "studies" / "pair" / "logs").glob("worker-*.log"))
    assert len(logs) == 2
    # The worker processes keyed their trials as this process does (the code fingerprint
    # included): a rerun finds every trial current and trains nothing.
    assert main(["study", str(path), "--workers", "2", "--no-report"]) == 0
    assert "code changed" not in capsys.readouterr().out
    trials, _, _ = assert_each_point_finished_once(tmp_path, "pair", 2, grid)
    assert sum(len(ts) for ts in trials.values()) == 6


def test_median_pruning_stops_a_hopeless_learning_rate(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # One variant; trials run in grid order: two good ones first, then a learning rate
    # far too small, worse than their median at the first validation.
    path = write_study(
        tmp_path,
        name="pruned",
        grid=[4e-3, 2e-3, 1e-7],
        max_steps=6,
        corpus=corpus,
        variants=[{"name": "llama"}],
        baselines={},
        lr_search={"method": "grid", "grid": [4e-3, 2e-3, 1e-7], "pruner": "median"},
    )
    assert main(["study", str(path), "--no-report"]) == 0
    (trials,) = optuna_trials(tmp_path).values()
    states = {t.params["lr"]: t.state for t in trials}
    assert states == {4e-3: TrialState.COMPLETE, 2e-3: TrialState.COMPLETE, 1e-7: TrialState.PRUNED}
    pruned = next(t for t in trials if t.params["lr"] == 1e-7)
    assert list(pruned.intermediate_values) == [2]  # reported at step 2, stopped there
    assert "1 pruned" in capsys.readouterr().out


def test_a_workers_log_keeps_its_lines_after_kill_9(tmp_path):
    # A worker's stdout is its log file: block-buffered by default, so a worker killed
    # -9 left an empty log. The coordinator's worker environment makes it unbuffered.
    from cem_ablate.study.coordinator import worker_env

    script = "import os, signal; print('claimed trial 3', flush=False); os.kill(os.getpid(), signal.SIGKILL)"
    env_plain = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    for name, env in (("plain", env_plain), ("worker", worker_env(1))):
        with open(tmp_path / f"{name}.log", "w") as log:
            done = subprocess.run([sys.executable, "-c", script], stdout=log, stderr=subprocess.STDOUT, env=env)
        assert done.returncode == -signal.SIGKILL
    assert (tmp_path / "plain.log").read_text() == ""  # what the logs were before
    assert (tmp_path / "worker.log").read_text() == "claimed trial 3\n"
