"""Why a stale trial is stale, as the dry run says it: the study's trials are recorded in a
real Optuna storage as a run records them (trial key, code fingerprint, per-module
digests), under code that differs from this checkout in one module, or in nothing but
the rest of the key; nothing trains."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cem_ablate.cli.main import main
from cem_ablate.cli.study_command import load_expanded
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.ledger import TrialFacts
from cem_ablate.study.reuse import dry_run_reads
from cem_ablate.study.staleness import stale_cause
from cem_ablate.study.storage import StorageSettings, open_storage
from cem_ablate.study.trials import VariantTrials, worker_identity
from cem_ablate.study.variants import optuna_study_name
from tests.config.test_fingerprint import _bump_first_number, _edit_docstrings, source_copy
from tests.study.tiny_study import write_study

EDITED = "cem_ablate/training/engine.py"


def _record_trials(url: str, expanded, old_code, trial_key=lambda v, lr, seed: "old-" + v.trial_key(lr, seed)) -> int:
    """Claim and finish every slot of every variant as a run would have recorded it
    under `old_code(variant)` = (code fingerprint, per-module digests) and `trial_key`
    (by default one that is not current); returns how many."""
    storage = open_storage(StorageSettings(url, 10, 60))
    n = 0
    for v in expanded.variants:
        vt, _ = VariantTrials.open(
            storage, url, optuna_study_name(expanded.spec.name, v), expanded.spec.lr_search, list(expanded.spec.seeds)
        )
        vt.reconcile()
        digest, parts = old_code(v)
        while (trial := vt.claim(worker_identity())) is not None:
            lr = trial.suggest_float("lr", *vt.lr_search.lr_range, log=True)
            seed = trial.suggest_int("seed", 0, 10)
            vt.record(trial, trial_key=trial_key(v, lr, seed), code_fingerprint=digest, code_parts=parts)
            assert vt.finish(trial, TrialStatus.FINISHED, 10.0 + trial.number, {})
            n += 1
    return n


def _dry_run(study, url: str, capsys) -> str:
    capsys.readouterr()
    assert main(["study", str(study), "--dry-run", "--storage", url]) == 0
    return " ".join(capsys.readouterr().out.split())  # rich wraps long lines


def _dry_run_no_reuse(study, url: str, capsys) -> str:
    capsys.readouterr()
    assert main(["study", str(study), "--dry-run", "--no-reuse", "--storage", url]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_dry_run_names_the_module_that_changed(tmp_path, capsys):
    study = write_study(tmp_path)
    expanded = load_expanded(str(study), None, [])
    url = f"sqlite:///{tmp_path / 'optuna.db'}"

    def edited_engine(v):
        current = v.config.code_fingerprint()
        return "0ld", dict(current.parts) | {EDITED: "0" * 16}

    n = _record_trials(url, expanded, edited_engine)
    assert n == 4  # 2 variants x 2 lrs x 1 seed
    _, stale = dry_run_reads(expanded, url)
    assert stale.counts == {v.key: 2 for v in expanded.variants}
    assert stale.cause.code_changed and stale.cause.files == (EDITED,)
    out = _dry_run(study, url, capsys)
    assert (
        f"to retrain (code changed): 4 trials of this study finished under other code; code changed in: {EDITED}" in out
    )
    assert "not reused" not in out  # its own trials are retrained, not counted twice
    assert "to retrain (code changed): 4 trials" in _dry_run_no_reuse(study, url, capsys)  # with or without reuse

    # Another study of the same variants finds them trained under other code: not reused, and why.
    other = write_study(tmp_path, name="other")
    out = _dry_run(other, url, capsys)
    assert (
        "not reused (code changed): 4 trials of this study's grid other studies finished under other code; "
        f"code changed in: {EDITED}"
    ) in out
    assert "to retrain" not in out and "reused: none" not in out


def test_the_dry_run_says_when_only_the_data_or_platform_changed(tmp_path, capsys):
    study = write_study(tmp_path)
    expanded = load_expanded(str(study), None, [])
    url = f"sqlite:///{tmp_path / 'optuna.db'}"

    def same_code(v):
        current = v.config.code_fingerprint()
        return current.digest, dict(current.parts)

    _record_trials(url, expanded, same_code)
    out = _dry_run(study, url, capsys)
    assert "to retrain (data or platform version changed): 4 trials of this study finished under the same code" in out
    assert "code changed" not in out


def test_a_cause_names_every_changed_module_and_counts_past_four():
    from cem_ablate.config.fingerprint import CodeFingerprint

    current = CodeFingerprint("new", {f"m{i}.py": "a" for i in range(6)})
    old = TrialFacts(code_fingerprint="old", code_parts={f"m{i}.py": "b" for i in range(6)})
    unrecorded = TrialFacts()  # a trial from before per-module digests were recorded
    cause = stale_cause([(current, old), (current, unrecorded)])
    assert cause.old == {"old", "unrecorded"} and cause.new == {"new"}
    assert cause.where() == "m0.py, m1.py, m2.py, m3.py (+2 more)"
    assert stale_cause([(current, unrecorded)]).files == ()


def _dry_run_of(src, study, url: str) -> str:
    """`cem-ablate study --dry-run` run by the code in `src` (a copy of the sources)."""
    env = os.environ | {"PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", "study", str(study), "--dry-run", "--storage", url],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return " ".join(out.stdout.split())


@pytest.mark.slow
@pytest.mark.soak  # in CI: test_the_dry_run_names_the_module_that_changed above and
# tests/config/test_fingerprint.py (docstring, comment and reformat edits keep the key; a constant changes it)
def test_a_docstring_edit_keeps_every_trial_and_a_changed_constant_retrains_them(tmp_path):
    """The trials of a study recorded under this checkout's keys; a copy of the sources with
    every docstring of training/ edited still finds them all done; one digit of a constant
    in a training module changed, the dry run retrains them all and names that module."""
    src = source_copy(tmp_path / "src")
    study = write_study(tmp_path)
    expanded = load_expanded(str(study), None, [])
    url = f"sqlite:///{tmp_path / 'optuna.db'}"

    def current(v):
        code = v.config.code_fingerprint()
        return code.digest, dict(code.parts)

    _record_trials(url, expanded, current, trial_key=lambda v, lr, seed: v.trial_key(lr, seed))
    training = src / "cem_ablate" / "training"
    assert sum(_edit_docstrings(p) for p in training.glob("*.py")) > 20
    out = _dry_run_of(src, study, url)
    assert "done: 4 trials of this study already finished" in out and "to retrain" not in out

    edited = next(p for p in sorted(training.glob("*.py")) if _bump_first_number(p))
    out = _dry_run_of(src, study, url)
    assert (
        f"to retrain (code changed): 4 trials of this study finished under other code; code changed in: "
        f"cem_ablate/training/{edited.name}"
    ) in out
    assert "done:" not in out
