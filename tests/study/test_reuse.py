"""Trial reuse across studies: a trial key finished by one study is recorded, not
retrained, by the next study on the same storage; --no-reuse trains it again."""

from __future__ import annotations

import optuna

from cem_ablate.cli.main import main
from cem_ablate.tracking import tags as T
from tests.study.test_coordinator import mlflow_runs
from tests.study.tiny_study import write_study

GRID = (1e-3, 4e-3)


def _trials(root, study: str) -> list[tuple[str, optuna.trial.FrozenTrial]]:
    """(Optuna study name, trial) of every complete trial of `study`'s variants."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{root / 'mlruns' / 'optuna.db'}")
    return [
        (name, t)
        for name in optuna.get_all_study_names(storage)
        if name.startswith(f"{study}/")
        for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE
    ]


def test_study_b_trains_only_its_new_trials_and_reports_the_reused(tmp_path, corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    a = write_study(tmp_path, name="a", grid=GRID, corpus=corpus)
    assert main(["study", str(a), "--no-report"]) == 0
    # B shares the Llama variant (same config, lrs, seed, data) and adds CEM MLP.
    b = write_study(
        tmp_path,
        name="b",
        grid=GRID,
        corpus=corpus,
        variants=[{"name": "llama"}, {"name": "cem_mlp", "set": {"model.mlp": "cem"}}],
        baselines={"llama": {"model.mlp": "llama"}},
    )
    capsys.readouterr()
    assert main(["study", str(b), "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "reused: 2 trials already finished" in out
    assert "for the 2 trials left to train (2 already finished in the storage)" in out  # the CPU time
    # ... and the time A's Llama trials took, as recorded on the trials (the CEM MLP has none yet)
    from cem_ablate.cli.study_command import load_expanded
    from cem_ablate.study.dry_run import measured_seconds
    from cem_ablate.study.reuse import dry_run_reads

    grid, _ = dry_run_reads(load_expanded(str(b), None, []), f"sqlite:///{tmp_path / 'mlruns' / 'optuna.db'}")
    seconds = measured_seconds(grid)
    ((key, measured),) = seconds.items()  # the Llama variant only
    recorded = sorted(t.user_attrs["seconds"] for name, t in _trials(tmp_path, "a") if name.endswith(key))
    assert len(recorded) == 2 and sorted(measured) == recorded
    assert "measured: 2 finished trials of 1 of the 2 variants" in out
    assert "2 trials of variants with none finished not included" in out
    assert main(["study", str(b), "--dry-run", "--no-reuse"]) == 0
    assert "for all 4 trials" in " ".join(capsys.readouterr().out.split())  # reuse off: A's are retrained

    assert main(["study", str(b), "--report-dir", str(tmp_path / "reports")]) == 0
    a_trials = {t.user_attrs["trial_key"]: (name, t) for name, t in _trials(tmp_path, "a")}
    b_trials = [t for _, t in _trials(tmp_path, "b")]
    reused = [t for t in b_trials if "reused_from" in t.user_attrs]
    trained = [t for t in b_trials if "reused_from" not in t.user_attrs]
    assert len(reused) == 2 and len(trained) == 2  # only the CEM MLP trials trained
    for t in reused:
        name, original = a_trials[t.user_attrs["trial_key"]]
        assert t.value == original.value
        assert t.user_attrs["reused_from"] == f"{name}#{original.number}"
    # MLflow: B's Llama children link to A's children and carry their final metrics.
    _, a_children = mlflow_runs(tmp_path, "a")
    _, b_children = mlflow_runs(tmp_path, "b")
    a_by_id = {c.info.run_id: c for c in a_children}
    linked = [c for c in b_children if T.REUSED_FROM in c.data.tags]
    assert len(linked) == 2 and len(b_children) == 4
    for child in linked:
        original = a_by_id[child.data.tags[T.REUSED_FROM]]
        assert child.data.metrics["test_ppl"] == original.data.metrics["test_ppl"]
        assert child.data.tags[T.STATUS] == "finished"
    # ... and the report of B has the Llama row with its fit.
    report = (tmp_path / "reports" / "b" / "report.md").read_text()
    llama_row = next(line for line in report.splitlines() if line.startswith("| llama |"))
    assert "-" != llama_row.split("|")[4].strip()  # an optimum, from the reused trials
    # A dry run of B now: its own trained trials are "done", A's still "reused".
    capsys.readouterr()
    assert main(["study", str(b), "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "done: 2 trials of this study already finished" in out and "reused: 2 trials" in out
    assert "for the 0 trials left to train (4 already finished in the storage)" in out

    # --no-reuse trains everything of a third study.
    c = write_study(tmp_path, name="c", grid=GRID, corpus=corpus, variants=[{"name": "llama"}], baselines={})
    assert main(["study", str(c), "--no-reuse", "--no-report"]) == 0
    c_trials = [t for _, t in _trials(tmp_path, "c")]
    assert len(c_trials) == 2 and not any("reused_from" in t.user_attrs for t in c_trials)


def test_the_dry_run_leaves_no_sqlite_sidecars_beside_the_storage(tmp_path, corpus, monkeypatch, capsys):
    """A dry run only reads: once it returns, the SQLite file's WAL sidecars (-wal, -shm)
    are gone, not held open by this process (a user's quickstart storage is left as found)."""
    monkeypatch.chdir(tmp_path)
    a = write_study(tmp_path, name="a", grid=GRID, corpus=corpus)
    assert main(["study", str(a), "--no-report"]) == 0
    db = tmp_path / "mlruns" / "optuna.db"
    sidecars = [db.with_name(db.name + suffix) for suffix in ("-wal", "-shm")]
    assert not any(p.exists() for p in sidecars)  # the study closed its storage too
    assert main(["study", str(a), "--dry-run"]) == 0
    assert "already finished" in " ".join(capsys.readouterr().out.split())  # it did read the storage
    assert not any(p.exists() for p in sidecars)
