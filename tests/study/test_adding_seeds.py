"""Adding a seed to a study file and rerunning it trains only the new seed's trials
(the Optuna studies of the variants are the same: seeds are not part of the variant)."""

from __future__ import annotations

from collections import Counter

import optuna

from cem_ablate.cli.main import main
from tests.study.tiny_study import write_study


def _complete_slots(root) -> Counter:
    storage = optuna.storages.RDBStorage(f"sqlite:///{root / 'mlruns' / 'optuna.db'}")
    return Counter(
        t.user_attrs["slot"]
        for name in optuna.get_all_study_names(storage)
        for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE
    )


def test_a_second_seed_trains_only_its_trials(tmp_path, corpus, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one = dict(variants=[{"name": "llama"}], baselines={})
    assert main(["study", str(write_study(tmp_path, grid=(1e-3,), corpus=corpus, **one)), "--no-report"]) == 0
    assert _complete_slots(tmp_path) == Counter({"lr=0.001,seed=0": 1})
    two = write_study(tmp_path, grid=(1e-3,), corpus=corpus, seeds=[0, 1], **one)
    assert main(["study", str(two), "--no-report"]) == 0
    assert _complete_slots(tmp_path) == Counter({"lr=0.001,seed=0": 1, "lr=0.001,seed=1": 1})


def test_a_baseline_added_to_the_study_file_is_compared_on_rerun(tmp_path, corpus, monkeypatch):
    # Three variants, one seed; then the same file with a second baseline (CEM
    # attention with the Llama MLP, for the full CEM variant): the rerun trains
    # nothing and the report gains the new paired row.
    from cem_ablate.reporting.report import build_comparisons
    from cem_ablate.tracking.readback import read_study

    monkeypatch.chdir(tmp_path)
    variants = [
        {"name": "llama"},
        {"name": "cem_attention", "set": {"model.attention": "cem"}},
        {"name": "full_cem", "set": {"model.attention": "cem", "model.mlp": "cem"}},
    ]
    llama = {"llama": {"model.attention": "llama", "model.mlp": "llama"}}
    first = write_study(tmp_path, grid=(1e-3,), corpus=corpus, variants=variants, baselines=llama)
    assert main(["study", str(first), "--no-report"]) == 0
    slots = _complete_slots(tmp_path)
    second = write_study(
        tmp_path,
        grid=(1e-3,),
        corpus=corpus,
        variants=variants,
        baselines=llama | {"cem_attention": {"model.mlp": "llama"}},
    )
    assert main(["study", str(second), "--no-report"]) == 0
    assert _complete_slots(tmp_path) == slots  # nothing retrained
    records = read_study(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", "tiny")
    rows = [(c.variant, c.baseline) for c in build_comparisons(records).rows]
    assert ("full_cem", "cem_attention") in rows and ("full_cem", "llama") in rows
    # and dropping it again removes the row (the same file, rewritten)
    first = write_study(tmp_path, grid=(1e-3,), corpus=corpus, variants=variants, baselines=llama)
    assert main(["study", str(first), "--no-report"]) == 0
    records = read_study(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", "tiny")
    assert ("full_cem", "cem_attention") not in [(c.variant, c.baseline) for c in build_comparisons(records).rows]
