"""The ledger (study.ledger): the one reader and writer of Optuna user attributes."""

import ast
from pathlib import Path

import optuna
import pytest

import cem_ablate
from cem_ablate.study.ledger import TrialFacts, enqueue, record_study, record_trial, study_facts, trial_facts
from cem_ablate.study.optuna_storage import storage_of, trial_id_of
from cem_ablate.study.storage import StorageSettings, open_storage

PACKAGE = Path(cem_ablate.__file__).parent


@pytest.fixture
def study(tmp_path):
    storage = open_storage(StorageSettings(f"sqlite:///{tmp_path / 'optuna.db'}", 10, 60))
    return optuna.create_study(study_name="s/v", storage=storage)


def test_facts_written_by_the_ledger_are_the_stored_strings_every_store_has(study):
    storage = storage_of(study)
    enqueue(study, {"lr": 1e-3, "seed": 0}, "lr=0.001,seed=0", 1)
    (t,) = study.get_trials(deepcopy=False)
    record_trial(
        storage,
        trial_id_of(t),
        trial_key="k1",
        code_fingerprint="c1",
        code_parts={"a.py": "d"},
        mlflow_run_id="run1",
        run_dir="/x",
        worker={"host": "h", "pid": 3},
        reason="",
        seconds=1.5,
        steps=4,
        tokens_seen=None,
        status="failed",
    )
    stored = storage.get_trial(trial_id_of(t)).user_attrs
    assert stored == {
        "slot": "lr=0.001,seed=0",
        "attempt": 1,
        "trial_key": "k1",
        "code_fingerprint": "c1",
        "code_parts": {"a.py": "d"},
        "mlflow_run_id": "run1",
        "run_dir": "/x",
        "worker": {"host": "h", "pid": 3},
        "reason": "",
        "seconds": 1.5,
        "steps": 4,
        "status": "failed",
    }
    facts = trial_facts(storage.get_trial(trial_id_of(t)))
    assert facts.slot == "lr=0.001,seed=0" and facts.attempt == 1 and facts.status == "failed"
    assert facts.outcome() == {"steps": 4, "seconds": 1.5} and facts.tokens_seen is None
    with pytest.raises(TypeError, match="not a trial fact: colour"):
        record_trial(storage, trial_id_of(t), colour="red")


def test_an_old_store_reads_whatever_it_holds(study):
    """Attributes as releases before the ledger wrote them, missing ones, odd types."""
    storage = storage_of(study)
    study.enqueue_trial({"lr": 1e-3, "seed": 0}, user_attrs={"slot": "lr=0.001,seed=0"})
    (t,) = study.get_trials(deepcopy=False)
    storage.set_trial_user_attr(trial_id_of(t), "worker", "not-a-dict")
    storage.set_trial_user_attr(trial_id_of(t), "something_else", 3)
    facts = trial_facts(storage.get_trial(trial_id_of(t)))
    assert facts == TrialFacts(slot="lr=0.001,seed=0")
    study.set_user_attr("variant", "llama")
    study.set_user_attr("mlflow_parent_run_id:abcd1234", "p1")
    sid = storage.get_study_id_from_name("s/v")
    facts = study_facts(storage, sid)
    assert facts.variant == "llama" and facts.parent("abcd1234") == "p1" and facts.seeds_active is None
    record_study(storage, sid, seeds_active=3, parent=("ffff0000", "p2"))
    assert storage.get_study_user_attrs(sid)["seeds_active"] == 3
    assert study_facts(storage, sid).parents == {"abcd1234": "p1", "ffff0000": "p2"}


def test_only_the_ledger_touches_optuna_user_attributes():
    touching = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else node.arg if isinstance(node, ast.keyword) else None
            if name and ("user_attr" in name or name == "enqueue_trial"):
                touching.append(str(path.relative_to(PACKAGE)))
    assert set(touching) == {"study/ledger.py"}, sorted(set(touching))
