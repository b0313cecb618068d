"""The Optuna trial queue on a real SQLite storage, without training."""

import multiprocessing
import subprocess
import sys
import time

import pytest
from optuna.trial import TrialState

from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.optuna_storage import trial_id_of
from cem_ablate.study.spec import LrSearchConfig
from cem_ablate.study.storage import StorageSettings, open_storage
from cem_ablate.study.trials import VariantTrials, trial_slots, worker_identity

GRID = LrSearchConfig(grid=[1e-3, 2e-3, 4e-3])


def open_variant(url, name="s/v", lr_search=GRID, seeds=(0,), heartbeat=10, grace=60):
    storage = open_storage(StorageSettings(url, heartbeat, grace))
    return VariantTrials.open(storage, url, name, lr_search, list(seeds))


def claim_and_suggest(vt, identity):
    trial = vt.claim(identity)
    if trial is None:
        return None
    lr = trial.suggest_float("lr", *vt.lr_search.lr_range, log=True)
    seed = trial.suggest_categorical("seed", [0, 1])
    return trial, lr, seed


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'optuna.db'}"


def test_trial_slots():
    assert [s.key for s in trial_slots(GRID, [0, 1])] == [
        "lr=0.001,seed=0",
        "lr=0.001,seed=1",
        "lr=0.002,seed=0",
        "lr=0.002,seed=1",
        "lr=0.004,seed=0",
        "lr=0.004,seed=1",
    ]
    tpe = LrSearchConfig(method="tpe", grid=[], low=1e-4, high=1e-2, n_trials=3)
    slots = trial_slots(tpe, [0])
    assert len(slots) == 3 and all(s.lr is None for s in slots)


def test_create_is_atomic_and_reconcile_idempotent(url):
    vt, created = open_variant(url)
    again, created_again = open_variant(url)
    assert created and not created_again
    assert len(vt.reconcile()) == 3
    assert again.reconcile() == [] and len(vt.all_trials()) == 3


def test_every_slot_is_claimed_once_and_final_states_stick(url):
    vt, _ = open_variant(url, seeds=(0, 1))
    me = worker_identity()
    seen = []
    while (claimed := claim_and_suggest(vt, me)) is not None:
        trial, lr, seed = claimed
        seen.append((lr, seed))
        status = {1e-3: TrialStatus.FINISHED, 2e-3: TrialStatus.DIVERGED, 4e-3: TrialStatus.FAILED}[lr]
        assert vt.finish(trial, status, 30.0 if status == TrialStatus.FINISHED else None, {"reason": "test"})
    assert sorted(seen) == sorted((lr, s) for lr in GRID.grid for s in (0, 1))
    assert vt.is_done()
    # the stored attribute is the plain string (old stores), read back as the enum
    assert sorted({t.user_attrs["status"] for t in vt.all_trials()}) == ["diverged", "failed", "finished"]
    assert {p.status for p in vt.points()} == {TrialStatus.FINISHED, TrialStatus.DIVERGED, TrialStatus.FAILED}
    assert sorted(vt.fit_points()) == [(1e-3, 30.0), (1e-3, 30.0)]
    # diverged is final, failed is retried only when asked (a new `cem-ablate study` run)
    assert vt.reconcile() == []
    assert sorted(vt.reconcile(retry_failed=True)) == ["lr=0.004,seed=0", "lr=0.004,seed=1"]
    retry = vt.claim(me)
    assert retry.suggest_float("lr", 1e-3, 4e-3, log=True) == 4e-3


def test_a_trial_of_a_dead_local_process_is_requeued_with_its_params(url, tmp_path):
    vt, _ = open_variant(url)
    vt.reconcile()
    # A separate process claims a trial and is killed with it.
    script = (
        "import os, sys\n"
        "from cem_ablate.study.storage import StorageSettings, open_storage\n"
        "from cem_ablate.study.trials import VariantTrials, worker_identity\n"
        "from cem_ablate.study.spec import LrSearchConfig\n"
        f"url = {url!r}\n"
        "vt, _ = VariantTrials.open(open_storage(StorageSettings(url)), url, 's/v',"
        " LrSearchConfig(grid=[1e-3, 2e-3, 4e-3]), [0])\n"
        "t = vt.claim(worker_identity())\n"
        "t.suggest_float('lr', 1e-3, 4e-3, log=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=False)
    running = [t for t in vt.all_trials() if t.state == TrialState.RUNNING]
    assert len(running) == 1
    killed_lr = running[0].params["lr"]
    claimed = [claim_and_suggest(vt, worker_identity()) for _ in range(3)]
    assert vt.claim(worker_identity()) is None
    assert sorted(lr for _, lr, _ in claimed) == [1e-3, 2e-3, 4e-3]
    dead = vt.storage.get_trial(trial_id_of(running[0]))
    assert dead.state == TrialState.FAIL and dead.user_attrs["status"] == TrialStatus.KILLED
    assert killed_lr in [lr for _, lr, _ in claimed]


def test_a_silent_trial_goes_stale_after_the_grace_period(url):
    # Two workers' views of one storage: "fresh" under a grace period no loaded machine
    # outlasts between two claims, "stale" under one the test waits out (a wait that
    # runs long only makes the heartbeat older).
    vt, _ = open_variant(url, heartbeat=1, grace=60)
    vt.reconcile()
    other_machine = {"host": "elsewhere", "pid": 1}
    trial = vt.claim(other_machine)
    trial.suggest_float("lr", 1e-3, 4e-3, log=True)
    others = [vt.claim(other_machine) for _ in range(2)]
    assert vt.claim(other_machine) is None  # its heartbeat is fresh: not retried yet
    for t in others:
        vt.finish(t, TrialStatus.FINISHED, 1.0, {})
    vt, _ = open_variant(url, heartbeat=1, grace=2)
    time.sleep(3.5)
    retry = vt.claim(worker_identity())
    assert retry is not None and retry.number != trial.number
    assert vt.storage.get_trial(trial_id_of(trial)).state == TrialState.FAIL


def _claim_all(url, out, delay):
    vt, _ = open_variant(url, name="race/v", lr_search=LrSearchConfig(grid=[1e-4 * (i + 1) for i in range(12)]))
    me = worker_identity()
    while (claimed := claim_and_suggest(vt, me)) is not None:
        trial, lr, _ = claimed
        out.put(lr)
        time.sleep(delay)
        vt.finish(trial, TrialStatus.FINISHED, lr, {})


@pytest.mark.slow
def test_concurrent_workers_never_claim_the_same_point(url):
    grid = LrSearchConfig(grid=[1e-4 * (i + 1) for i in range(12)])
    vt, _ = open_variant(url, name="race/v", lr_search=grid)
    vt.reconcile()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(url, out, 0.05 * (i + 1))) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    lrs = [out.get(timeout=5) for _ in range(12)]
    assert sorted(lrs) == sorted(grid.grid)  # every point once, none twice
    trials = vt.all_trials()
    assert len(trials) == 12 and all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["worker"]["pid"] for t in trials}) > 1  # the work was shared


def test_sampled_search_draws_in_range_and_a_retry_keeps_its_lr(url):
    tpe = LrSearchConfig(method="tpe", grid=[], low=1e-4, high=1e-2, n_trials=3)
    vt, _ = open_variant(url, lr_search=tpe, seeds=(0,))
    me = worker_identity()
    first = vt.claim(me)
    lr = first.suggest_float("lr", 1e-4, 1e-2, log=True)
    assert 1e-4 <= lr <= 1e-2
    vt.finish(first, "killed", None, {})  # as if its worker died mid-trial
    drawn = []
    while (claimed := claim_and_suggest(vt, me)) is not None:
        trial, lr_i, _ = claimed
        drawn.append(lr_i)
        vt.finish(trial, TrialStatus.FINISHED, 1.0, {})
    assert len(drawn) == 3 and lr in drawn  # the killed slot came back with the same lr
    assert vt.is_done()


def test_a_slot_queued_twice_is_trained_once(url):
    vt, _ = open_variant(url)
    vt.reconcile()
    # what two coordinators on two machines could do at the same instant
    vt.study.enqueue_trial({"lr": 2e-3, "seed": 0}, user_attrs={"slot": "lr=0.002,seed=0"})
    me = worker_identity()
    first = claim_and_suggest(vt, me)  # lr=0.001
    second = claim_and_suggest(vt, me)  # lr=0.002, the first copy
    assert (first[1], second[1]) == (1e-3, 2e-3)
    third = claim_and_suggest(vt, me)  # the copy of 0.002 is skipped while 0.002 runs
    assert third[1] == 4e-3 and vt.claim(me) is None
    copies = [t for t in vt.all_trials() if t.user_attrs["slot"] == "lr=0.002,seed=0"]
    assert sorted(t.user_attrs.get("status", "") for t in copies) == ["", "duplicate"]
