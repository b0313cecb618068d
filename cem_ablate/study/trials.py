"""One Optuna study per variant; every trial a "slot" finished exactly once.

A slot is one unit of work of a variant: a grid point (lr x seed), or for a sampled
search (TPE, random) one of `n_trials` draws per seed. Slots are put in Optuna's own
trial queue (`enqueue_trial`, state WAITING, params fixed); a worker claims one by
the atomic WAITING -> RUNNING change. So no point is trained twice, whatever the
number of workers or machines. (GridSampler is not used for grids: it picks points
by reading the trial list, documents that concurrent workers may evaluate a point
twice, and counts FAIL as done. The queue gives the same grid without either.)

Trial states and the `status` fact (`config.trial_status.TrialStatus`, its stored
strings; every Optuna user attribute is read and written through `study.ledger`):

    COMPLETE              finished: value = test perplexity
    FAIL  status=diverged finished with NaN/inf loss: recorded, excluded from the
                          fit, never retried (rerunning would diverge again)
    FAIL  status=failed   the run raised: recorded with the error; retried once on the
                          next `cem-ablate study` invocation, not within one
    PRUNED                stopped early by the pruner
    WAITING (again)       its attempt was preempted (SIGTERM, SIGUSR1, a worker's SIGINT)
                          after saving a checkpoint: the same trial is claimed next
    FAIL  status=killed / no status
                          its worker died (stale heartbeat or dead local pid): the slot
                          is queued again with the same params, resuming its checkpoint
    FAIL  status=duplicate
                          defensive: a second queued copy of a finished/running slot

`reconcile` queues every slot that has no trial in progress and no final one; it is
idempotent and runs under the claim lock, so rerunning a killed study runs only
what is unfinished.

A final trial whose recorded trial key is not the current key of its lr and seed
(`RunConfig.trial_key()`: the code fingerprint, the data or the platform version
changed since it trained) is *stale*: kept in the storage for history, but invisible
to everything that reads the study (points, slot states, fits, reports), so its slot
counts as missing and is queued again. If the code goes back, the old trial's key
is current again and it counts again.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import FINAL_STATES, TrialStatus
from cem_ablate.study.ledger import enqueue, record_study, record_trial, study_facts, trial_facts
from cem_ablate.study.optuna_storage import storage_of, trial_for_id, trial_id_of
from cem_ablate.study.spec import LrSearchConfig, SequentialSeeds
from cem_ablate.study.storage import claim_lock

if TYPE_CHECKING:
    import optuna
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler
    from optuna.storages import BaseStorage, RDBStorage
    from optuna.trial import FrozenTrial

_LOG = logging.getLogger(__name__)

# A FAIL's `status` attribute as the study writes it; any other FAIL was killed.
RECORDED_FAILS = (TrialStatus.DIVERGED, TrialStatus.FAILED, TrialStatus.DUPLICATE)
# A slot's state is that of its first trial in this order (finished wins over a retry).
SLOT_PRECEDENCE = (
    TrialStatus.FINISHED,
    TrialStatus.DIVERGED,
    TrialStatus.PRUNED,
    TrialStatus.RUNNING,
    TrialStatus.WAITING,
    TrialStatus.FAILED,
)
# A slot with a trial in one of these is taken: a second claimed copy is a duplicate.
TAKEN = (TrialStatus.FINISHED, TrialStatus.DIVERGED, TrialStatus.PRUNED, TrialStatus.RUNNING)


@dataclass(frozen=True)
class Slot:
    key: str
    seed: int
    lr: float | None  # None: drawn by the sampler when the trial starts


def trial_slots(lr_search: LrSearchConfig, seeds: list[int] | SequentialSeeds) -> list[Slot]:
    if lr_search.method == "grid":
        return [Slot(f"lr={float(lr)!r},seed={seed}", seed, float(lr)) for lr in lr_search.grid for seed in seeds]
    assert lr_search.n_trials is not None  # required by tpe and random (LrSearchConfig.validate)
    return [Slot(f"seed={seed},draw={i}", seed, None) for seed in seeds for i in range(lr_search.n_trials)]


def make_sampler(lr_search: LrSearchConfig, worker_index: int = 0) -> BaseSampler:
    import optuna

    seed = lr_search.sampler_seed + worker_index
    if lr_search.method == "tpe":
        # constant_liar: running trials count as bad, so parallel workers spread out.
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    return optuna.samplers.RandomSampler(seed=seed)  # grid: every param is fixed by the queue


def make_pruner(lr_search: LrSearchConfig) -> BasePruner:
    import optuna

    if lr_search.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    if lr_search.pruner == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def worker_identity() -> dict[str, Any]:
    import psutil

    return {
        "host": socket.gethostname(),
        "boot": psutil.boot_time(),
        "pid": os.getpid(),
        "created": psutil.Process().create_time(),
    }


def is_dead_here(identity: Any) -> bool:
    """True if `identity` names a process of this machine (this boot) that is gone."""
    import psutil

    if not isinstance(identity, dict) or identity.get("host") != socket.gethostname():
        return False
    if identity.get("boot") != psutil.boot_time():
        return False
    try:
        return psutil.Process(int(identity["pid"])).create_time() != identity.get("created")
    except (psutil.NoSuchProcess, KeyError, ValueError):
        return True


def trial_status(trial: FrozenTrial) -> TrialStatus:
    """An Optuna trial's status, from its state and the stored `status` attribute (the edge
    where the stored string becomes a `TrialStatus`)."""
    from optuna.trial import TrialState

    status = trial_facts(trial).status
    if trial.state == TrialState.COMPLETE:
        return TrialStatus.FINISHED
    if trial.state == TrialState.PRUNED:
        return TrialStatus.PRUNED
    if trial.state == TrialState.RUNNING:
        return TrialStatus.RUNNING
    if trial.state == TrialState.WAITING:
        return TrialStatus.WAITING
    # A FAIL without a known status (none: its worker died before writing one) was killed.
    return TrialStatus(status) if status in RECORDED_FAILS else TrialStatus.KILLED


def slot_state(statuses: list[TrialStatus]) -> TrialStatus:
    for state in SLOT_PRECEDENCE:
        if state in statuses:
            return state
    return TrialStatus.MISSING


class HeartbeatThread:
    """Records the trial's heartbeat every interval while the trial trains, and stops
    beating for good once the claim is not live (a stopped worker that woke up after its
    trial was failed as stale touches nothing in Optuna)."""

    def __init__(self, storage: RDBStorage, trial_id: int, is_live: Callable[[], bool] = lambda: True) -> None:
        self._heartbeat_storage, self._heartbeat_trial, self._is_live = storage, trial_id, is_live
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="optuna-heartbeat", daemon=True)

    def _run(self) -> None:
        interval = self._heartbeat_storage.get_heartbeat_interval()
        while not self._stop.wait(interval):
            try:
                if not self._is_live():
                    return
                self._heartbeat_storage.record_heartbeat(self._heartbeat_trial)
            except Exception as err:  # noqa: BLE001  a busy database must not kill the training run
                _LOG.warning(
                    "heartbeat of trial %s not recorded (%s: %s); the next one is in %s s",
                    self._heartbeat_trial,
                    type(err).__name__,
                    err,
                    interval,
                )

    def __enter__(self) -> HeartbeatThread:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class VariantTrials:
    """The Optuna study of one variant and the slots it must finish."""

    def __init__(
        self,
        study: optuna.Study,
        storage_url: str,
        slots: list[Slot],
        lr_search: LrSearchConfig,
        sequential: SequentialSeeds | None = None,
        trial_key: Callable[[float, int], str] | None = None,
    ) -> None:
        self.study = study
        self._trial_key = trial_key  # (lr, seed) -> the current RunConfig.trial_key(); None: never stale
        self._keys: dict[tuple[float, int], str] = {}
        self.storage = storage_of(study)
        self.storage_url = storage_url
        self._slots = slots  # with sequential seeds: the slots of every seed up to max
        self.lr_search = lr_search
        self.sequential = sequential
        self.study_id = self.storage.get_study_id_from_name(study.study_name)

    @property
    def slots(self) -> list[Slot]:
        """The slots to finish; with sequential seeds, those of the seeds active now."""
        if self.sequential is None:
            return self._slots
        n = self.active_seeds()
        return [s for s in self._slots if s.seed < n]

    def active_seeds(self) -> int:
        """Sequential seeds: seeds 0..n-1 are active (stored in the Optuna study, so every
        worker and a rerun see the same number)."""
        seeds = study_facts(self.storage, self.study_id).seeds_active
        if seeds is not None:
            return seeds
        assert self.sequential is not None  # fixed seeds never ask how many are active
        return self.sequential.min

    def grow_active_seeds(self, n: int) -> bool:
        """Activate seeds 0..n-1 (never fewer than now, never more than max); True if it grew."""
        assert self.sequential is not None and self.sequential.max is not None  # validated with until: resolved
        target = min(n, self.sequential.max)
        if target <= self.active_seeds():
            return False
        record_study(self.storage, self.study_id, seeds_active=target)
        return True

    @classmethod
    def open(
        cls,
        storage: BaseStorage,
        storage_url: str,
        study_name: str,
        lr_search: LrSearchConfig,
        seeds: list[int] | SequentialSeeds,
        worker_index: int = 0,
        trial_key: Callable[[float, int], str] | None = None,
    ) -> tuple[VariantTrials, bool]:
        """Create the study (True) or load it (False): creation is atomic in the storage."""
        import optuna

        kwargs: dict[str, Any] = dict(
            study_name=study_name,
            storage=storage,
            direction="minimize",
            sampler=make_sampler(lr_search, worker_index),
            pruner=make_pruner(lr_search),
        )
        try:
            study, created = optuna.create_study(load_if_exists=False, **kwargs), True
        except optuna.exceptions.DuplicatedStudyError:
            study, created = optuna.load_study(**{k: v for k, v in kwargs.items() if k != "direction"}), False
        sequential = seeds if isinstance(seeds, SequentialSeeds) else None
        return cls(study, storage_url, trial_slots(lr_search, seeds), lr_search, sequential, trial_key), created

    # -- reading ---------------------------------------------------------------------

    def all_trials(self) -> list[FrozenTrial]:
        """Every trial in the storage, stale ones included (history)."""
        return self.storage.get_all_trials(self.study_id, deepcopy=False)

    def current_trials(self) -> list[FrozenTrial]:
        """The trials that count: every one but the stale."""
        return [t for t in self.all_trials() if not self.is_stale(t)]

    def current_key(self, lr: float, seed: int) -> str | None:
        if self._trial_key is None:
            return None
        point = (float(lr), int(seed))
        if point not in self._keys:
            self._keys[point] = self._trial_key(*point)
        return self._keys[point]

    def is_stale(self, trial: FrozenTrial) -> bool:
        """A final trial recorded under another trial key than its lr and seed have now."""
        recorded = trial_facts(trial).trial_key
        lr, seed = trial.params.get("lr"), trial.params.get("seed")
        if self._trial_key is None or not recorded or lr is None or seed is None:
            return False
        return trial_status(trial) in FINAL_STATES and recorded != self.current_key(lr, seed)

    def stale_slots(self) -> dict[str, list[FrozenTrial]]:
        """Slot key -> its stale trials, for the slots that have no current final trial
        (those a run retrains now; a retrained slot is not listed again)."""
        states = self.slot_states()
        out: dict[str, list[FrozenTrial]] = defaultdict(list)
        for t in self.all_trials():
            slot = trial_facts(t).slot
            if slot in states and states[slot] not in FINAL_STATES and self.is_stale(t):
                out[slot].append(t)
        return dict(out)

    def points(self) -> list[TrialRecord]:
        """The current trials as records (for fits, progress and reports)."""
        out = []
        for t in self.current_trials():
            lr = t.params.get("lr", t.system_attrs.get("fixed_params", {}).get("lr"))
            seed = t.params.get("seed", t.system_attrs.get("fixed_params", {}).get("seed"))
            status, facts = trial_status(t), trial_facts(t)
            value = t.value if status == TrialStatus.FINISHED else None
            ended_otherwise = status not in (TrialStatus.FINISHED, TrialStatus.RUNNING, TrialStatus.WAITING)
            reason = facts.reason if ended_otherwise else ""
            out.append(
                TrialRecord(
                    lr,
                    seed,
                    status,
                    value,
                    reason,
                    slot=facts.slot,
                    trial_key=facts.trial_key,
                    study=self.study.study_name,
                    number=t.number,
                    run_id=facts.mlflow_run_id,
                    cause=Cause.read(facts.cause),
                )
            )
        return out

    def slot_states(self) -> dict[str, TrialStatus]:
        by_slot: dict[str, list[TrialStatus]] = defaultdict(list)
        for p in self.points():
            by_slot[p.slot].append(p.status)
        return {slot.key: slot_state(by_slot.get(slot.key, [])) for slot in self.slots}

    def is_done(self) -> bool:
        return all(state in FINAL_STATES for state in self.slot_states().values())

    def fit_points(self) -> list[tuple[float, float]]:
        """(lr, test ppl) of every finished trial, for the Akima fit."""
        return [
            (p.lr, p.value)
            for p in self.points()
            if p.status == TrialStatus.FINISHED and p.lr is not None and p.value is not None and math.isfinite(p.value)
        ]

    # -- queueing and claiming ---------------------------------------------------------

    def reconcile(self, retry_failed: bool = False) -> list[str]:
        """Queue every slot with nothing in progress and nothing final. Idempotent."""
        trials_by_slot: dict[str, list[FrozenTrial]] = defaultdict(list)
        for t in self.current_trials():
            trials_by_slot[trial_facts(t).slot].append(t)
        queued = []
        for slot in self.slots:
            trials = trials_by_slot.get(slot.key, [])
            state = slot_state([trial_status(t) for t in trials])
            if state == TrialStatus.MISSING or (retry_failed and state == TrialStatus.FAILED):
                params: dict[str, Any] = {"seed": slot.seed}
                if slot.lr is not None:
                    params["lr"] = slot.lr
                else:  # a sampled slot retries the lr it had drawn (and resumes its checkpoint)
                    drawn = [t.params["lr"] for t in trials if "lr" in t.params]
                    if drawn:
                        params["lr"] = drawn[-1]
                enqueue(self.study, params, slot.key, len(trials) + 1)
                queued.append(slot.key)
        return queued

    def fail_dead_trials(self) -> None:
        """RUNNING trials of dead workers -> FAIL: stale heartbeat, or a dead local pid."""
        import optuna
        from optuna.trial import TrialState

        optuna.storages.fail_stale_trials(self.study)
        for t in self.storage.get_all_trials(self.study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            if is_dead_here(trial_facts(t).worker):
                try:
                    record_trial(self.storage, trial_id_of(t), status=TrialStatus.KILLED.value)
                    self.storage.set_trial_state_values(trial_id_of(t), TrialState.FAIL)
                except optuna.exceptions.UpdateFinishedTrialError:
                    pass

    def claim(self, identity: dict[str, Any], waits: Callable[[str], bool] | None = None) -> optuna.Trial | None:
        """Take one queued slot as an `optuna.Trial` (RUNNING, heartbeat on), or None.
        `waits(slot key)`: leave that slot queued for now (a campaign's trial that another
        study trains first, `study.campaign_session`)."""
        import optuna
        from optuna.trial import TrialState

        with claim_lock(self.storage_url):
            self.fail_dead_trials()
            self.reconcile()
            for t in self.storage.get_all_trials(self.study_id, deepcopy=False, states=(TrialState.WAITING,)):
                if waits is not None and waits(trial_facts(t).slot):
                    continue
                # Heartbeat first: a claimed trial never exists without one, so a worker
                # killed right after claiming still leaves a trial that goes stale.
                trial_id = trial_id_of(t)
                # Optuna's cache in front of an RDBStorage is a BaseHeartbeat too (storage_of types it BaseStorage).
                self.storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]
                try:
                    if not self.storage.set_trial_state_values(trial_id, TrialState.RUNNING):
                        continue
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue
                record_trial(self.storage, trial_id, worker=identity)
                if self._is_duplicate(t):
                    record_trial(self.storage, trial_id, status=TrialStatus.DUPLICATE.value)
                    self.storage.set_trial_state_values(trial_id, TrialState.FAIL)
                    continue
                return trial_for_id(self.study, trial_id)
        return None

    def _is_duplicate(self, claimed: FrozenTrial) -> bool:
        """Another trial of the same slot is final or running (checked after our claim).

        Only reachable when two coordinators queued the same slot at once (PostgreSQL,
        several machines). Of two claims, the later one sees the earlier as running and
        yields; if both claim before either checks, both yield and the slot is queued
        again. Two workers never train one slot.
        """
        slot = trial_facts(claimed).slot
        for t in self.current_trials():
            if t.number != claimed.number and trial_facts(t).slot == slot:
                if trial_status(t) in TAKEN:
                    return True
        return False

    def has_running(self) -> bool:
        from optuna.trial import TrialState

        return bool(self.storage.get_all_trials(self.study_id, deepcopy=False, states=(TrialState.RUNNING,)))

    # -- finishing -------------------------------------------------------------------

    def is_live(self, trial: optuna.Trial) -> bool:
        """Whether this claim still holds: the trial is RUNNING (a claim failed as stale
        is FAIL for good; its slot was queued as a new trial)."""
        from optuna.trial import TrialState

        return self.storage.get_trial(trial_id_of(trial)).state == TrialState.RUNNING

    def record(self, trial: optuna.Trial, **facts: Any) -> None:
        """Record facts of a claimed trial (study.ledger; refused by Optuna once it is finished)."""
        record_trial(self.storage, trial_id_of(trial), **facts)

    def release(self, trial: optuna.Trial, reason: str, cause: str = "") -> bool:
        """Queue a claimed trial again now: the same trial back to WAITING (same params,
        same slot), for the next claim to resume its checkpoint without waiting out the
        grace period (its attempt stopped on a signal, training.preemption). False if the
        claim was already lost (the trial was failed as stale meanwhile)."""
        import optuna
        from optuna.trial import TrialState

        try:
            record_trial(self.storage, trial_id_of(trial), reason=reason, cause=cause or None)
            return self.storage.set_trial_state_values(trial_id_of(trial), TrialState.WAITING)
        except optuna.exceptions.UpdateFinishedTrialError:
            return False

    def finish(self, trial: optuna.Trial, status: TrialStatus, value: float | None, facts: dict[str, Any]) -> bool:
        """Record the outcome; False if the trial was already failed as stale meanwhile."""
        import optuna
        from optuna.trial import TrialState

        try:
            record_trial(self.storage, trial_id_of(trial), **facts, status=TrialStatus(status).value)
            if status == TrialStatus.FINISHED:
                self.study.tell(trial, value)
            elif status == TrialStatus.PRUNED:
                self.study.tell(trial, state=TrialState.PRUNED)
            else:
                self.study.tell(trial, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            return False
        return True
