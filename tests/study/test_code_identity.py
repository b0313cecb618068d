"""Code-aware trial identity end to end: a plugin MLP edited (GELU -> tanh-GELU) after a
study ran. The rerun says so in one line and retrains exactly the trials of the
variant using it (new numbers reported; the old trials stay in the storage as
history); a second study reuses nothing trained before the edit. The studies run as
`cem-ablate study` subprocesses on a copy of the sources with the plugin on PYTHONPATH
(its entry point is read at startup). The queue's side (stale trials, resume, the code
going back) is checked on a storage without training."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import optuna
import pytest

from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.spec import LrSearchConfig
from cem_ablate.study.storage import StorageSettings, open_storage
from cem_ablate.study.trials import VariantTrials, worker_identity
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.readback import read_study
from cem_ablate.tracking.run_context import git_dirty
from tests.config.plugin_package import edit_to_tanh_gelu, install_plugin
from tests.config.test_fingerprint import source_copy
from tests.study.test_coordinator import mlflow_runs
from tests.study.tiny_study import write_study

GRID = (1e-3, 4e-3)
VARIANTS = [{"name": "llama"}, {"name": "gelu", "set": {"model.mlp": "gelu_test"}}]


def _cli(root, command: str, *args: str) -> str:
    env = os.environ | {"PYTHONPATH": f"{root / 'src'}{os.pathsep}{root / 'site'}", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", command, *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _study(root, *args: str) -> str:
    return _cli(root, "study", *args)


def _report_note(root, study) -> str | None:
    """The report's first-line note on trials of other code, if it writes one."""
    out = root / f"report-{len(list(root.glob('report-*')))}"
    _cli(root, "report", str(study), "--out", str(out))
    match = re.search(r"^\*\*(note: .*)\*\*$", (out / "report.md").read_text(), re.M)
    return match.group(1) if match else None


def _trials(root, study: str, variant: str) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.RDBStorage(f"sqlite:///{root / 'mlruns' / 'optuna.db'}")
    name = next(n for n in optuna.get_all_study_names(storage) if n.startswith(f"{study}/{variant}"))
    return [
        t
        for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE
    ]


@pytest.mark.slow
@pytest.mark.soak
def test_an_edited_plugin_retrains_its_trials_and_is_never_reused(tmp_path, corpus):
    source_copy(tmp_path / "src")
    activation = install_plugin(tmp_path / "site")
    a = write_study(
        tmp_path,
        name="a",
        grid=GRID,
        corpus=corpus,
        variants=VARIANTS,
        max_steps=2,
        baselines={"llama": {"model.mlp": "llama"}},
    )
    _study(tmp_path, str(a), "--no-report")
    old_gelu = {t.number: t for t in _trials(tmp_path, "a", "gelu")}
    old_llama = {t.number: t.value for t in _trials(tmp_path, "a", "llama")}
    assert len(old_gelu) == 2 and len(old_llama) == 2

    edit_to_tanh_gelu(activation)
    assert (
        "to retrain (code changed): 2 trials of this study finished under other code; code changed in: "
        "gelu_plugin/activation.py"
    ) in " ".join(_study(tmp_path, str(a), "--dry-run").split())
    # Before the rerun the report still shows the stored numbers, but says whose they are.
    note = _report_note(tmp_path, a)
    assert note is not None and note.startswith(
        "note: 2 of 4 finished trials (gelu) were trained under another trial key than this checkout gives them"
    ), note
    out = _study(tmp_path, str(a), "--no-report")
    lines = [line for line in out.splitlines() if "code changed" in line]
    assert len(lines) == 1
    assert re.fullmatch(
        r"code changed since 2 trials were trained \(variant: gelu\): fingerprint \w+ -> \w+ "
        r"in gelu_plugin/activation\.py; retraining them",
        lines[0],
    ), lines[0]

    gelu = _trials(tmp_path, "a", "gelu")
    new_gelu = [t for t in gelu if t.number not in old_gelu]
    assert len(gelu) == 4 and len(new_gelu) == 2  # the old ones are kept, as history
    assert {t.params["lr"] for t in new_gelu} == set(GRID)
    assert {t.user_attrs["code_fingerprint"] for t in new_gelu}.isdisjoint(
        t.user_attrs["code_fingerprint"] for t in old_gelu.values()
    )
    for t in new_gelu:  # tanh-GELU trains another function: other numbers
        old = next(o for o in old_gelu.values() if o.params["lr"] == t.params["lr"])
        assert t.value != old.value
    assert {t.number: t.value for t in _trials(tmp_path, "a", "llama")} == old_llama  # not retrained

    # What is reported is the new code's: MLflow read back holds only the current children
    # (and the report's note on other code's trials is gone).
    assert _report_note(tmp_path, a) is None
    records = {r.name: r for r in read_study(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", "a")}
    assert sorted(t.value for t in records["gelu"].trials) == sorted(t.value for t in new_gelu)
    assert len(records["llama"].trials) == 2
    _, children = mlflow_runs(tmp_path, "a")
    stale = [c for c in children if T.STALE in c.data.tags]
    assert {c.info.run_id for c in stale} == {t.user_attrs["mlflow_run_id"] for t in old_gelu.values()}
    current = [c for c in children if c.data.tags.get(T.VARIANT) == "gelu" and T.STALE not in c.data.tags]
    assert {c.data.tags[T.CODE_FINGERPRINT] for c in current} == {t.user_attrs["code_fingerprint"] for t in new_gelu}

    # A second study of the same config reuses the new code's trials, none from before the edit.
    b = write_study(
        tmp_path,
        name="b",
        grid=GRID,
        corpus=corpus,
        variants=VARIANTS,
        max_steps=2,
        baselines={"llama": {"model.mlp": "llama"}},
    )
    _study(tmp_path, str(b), "--no-report")
    b_gelu = _trials(tmp_path, "b", "gelu")
    assert len(b_gelu) == 2
    assert {t.user_attrs["reused_from"].rpartition("#")[2] for t in b_gelu} == {str(t.number) for t in new_gelu}
    assert {t.user_attrs["trial_key"] for t in b_gelu} == {t.user_attrs["trial_key"] for t in new_gelu}
    assert sorted(t.value for t in b_gelu) == sorted(t.value for t in new_gelu)


def test_git_dirty_reads_the_repository_state(tmp_path):
    assert git_dirty(str(tmp_path)) is None  # no repository: no tag
    env = os.environ | {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, env=env)
    assert git_dirty(str(tmp_path)) is False
    (tmp_path / "edited.py").write_text("x = 1\n")
    assert git_dirty(str(tmp_path)) is True


def _train_all(vt: VariantTrials) -> list[int]:
    """Claim and finish every queued slot under the current key (as run_trial records it)."""
    numbers = []
    while (trial := vt.claim(worker_identity())) is not None:
        lr = trial.suggest_float("lr", *vt.lr_search.lr_range, log=True)
        seed = trial.suggest_int("seed", 0, 10)
        trial.set_user_attr("trial_key", vt.current_key(lr, seed))
        assert vt.finish(trial, TrialStatus.FINISHED, 10.0 + trial.number, {})
        numbers.append(trial.number)
    return numbers


def test_trials_of_another_key_are_stale_until_the_key_comes_back(tmp_path):
    """Trials recorded under another trial key than their lr and seed have now are kept
    but not read: their slots are queued again, once; a retrained slot is not stale any
    more (a resumed rerun trains nothing); if the code goes back, the old trials count."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    storage = open_storage(StorageSettings(url, 10, 60))

    def open_with(code: str) -> VariantTrials:  # one process of one code
        return VariantTrials.open(
            storage,
            url,
            "s/v",
            LrSearchConfig(grid=[1e-3, 4e-3]),
            [0],
            trial_key=lambda lr, seed: f"{code}-{lr}-{seed}",
        )[0]

    before = open_with("A")
    before.reconcile()
    old = _train_all(before)
    assert len(old) == 2 and before.is_done() and before.stale_slots() == {}

    edited = open_with("B")
    assert {slot: [t.number for t in ts] for slot, ts in edited.stale_slots().items()} == {
        "lr=0.001,seed=0": [old[0]],
        "lr=0.004,seed=0": [old[1]],
    }
    assert edited.points() == [] and not edited.is_done()
    assert len(edited.reconcile()) == 2 and edited.reconcile() == []  # queued once
    new = _train_all(edited)
    assert sorted(p.number for p in edited.points()) == sorted(new) and edited.is_done()
    assert edited.stale_slots() == {} and edited.reconcile() == []  # a rerun now trains nothing
    assert len(edited.all_trials()) == 4  # the old trials are history, not deleted

    reverted = open_with("A")
    assert sorted(p.number for p in reverted.points()) == sorted(old) and reverted.is_done()
