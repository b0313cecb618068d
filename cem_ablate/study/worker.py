"""The worker loop: claim a queued trial of some variant, train it, repeat.

    python -m cem_ablate.study.worker PAYLOAD --index I

runs one worker process over the payload the coordinator wrote (`write_worker_payload`: the validated
study and its settings, pickled: typed objects, so nothing is parsed again). Any number
of workers (processes, machines) run this loop against one storage.
Variants are visited round-robin, starting at a different one per worker, so
results arrive for every variant early (a campaign's tiers in order: its proxies first). When nothing is queued but trials are still
running elsewhere, the worker waits: a running trial of a dead worker goes stale and
is queued again, and this worker may be the one to retry it.

SIGTERM, SIGUSR1 and SIGINT (training.preemption) stop the worker: the trial in training
saves a checkpoint at its next step boundary and is queued again at once; no new trial
is claimed. The worker prints one `preempted: ` line per such trial (the coordinator
repeats it) and exits with 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cem_ablate import registry
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.optuna_storage import trial_id_of
from cem_ablate.study.trial_run import run_trial
from cem_ablate.study.trials import HeartbeatThread, worker_identity
from cem_ablate.training.preemption import STOP, STOP_SIGNALS, exit_soon

if TYPE_CHECKING:
    import optuna

    from cem_ablate.study.session_protocols import QueueSession, TrialSession
    from cem_ablate.study.settings import StudySettings
    from cem_ablate.study.variants import Variant

Tiers = Sequence[Sequence[tuple["TrialSession", "Variant"]]]

IDLE_POLL_S = 2.0
PREEMPTED = "preempted: "  # the first words of a worker's line for a preempted trial


def preempted_line(outcome: TrialRecord) -> str:
    """One line: which trial stopped on a signal, at which step (its reason says), and that it waits again."""
    return (
        f"{PREEMPTED}{outcome.variant} {outcome.slot} (trial {outcome.number}) "
        f"{outcome.reason.removeprefix('preempted ')}: checkpoint saved, trial queued again"
    )


def work(
    session: QueueSession[Any],
    worker_index: int = 0,
    on_start: Callable[[str, object], None] | None = None,
    on_end: Callable[[TrialRecord], None] | None = None,
) -> list[TrialRecord]:
    """Claim and run trials until none is queued or running, or until a stop signal (then
    the trial in training is queued again with its checkpoint, `STOP.received` says which
    signal). `session.queue()` gives the (study session, variant) pairs in tiers, an
    earlier tier claimed first (a campaign's proxies); one study is one tier."""
    with STOP.listen(STOP_SIGNALS + (signal.SIGINT,)):
        return _work(session, worker_index, on_start, on_end)


def _work(
    session: QueueSession[Any],
    worker_index: int,
    on_start: Callable[[str, object], None] | None,
    on_end: Callable[[TrialRecord], None] | None,
) -> list[TrialRecord]:
    identity = worker_identity()
    tiers = session.queue()
    turns = [worker_index] * len(tiers)
    outcomes: list[TrialRecord] = []
    while STOP.received is None:
        claimed = _claim(session, tiers, turns, identity)
        if claimed is None:
            if any(t.has_running() for t in session.trials.values()):
                time.sleep(IDLE_POLL_S)
                continue
            return outcomes
        owner, variant, trial = claimed
        # Heartbeat from the claim on, not only while training: the trial's MLflow child,
        # imports and config come first, and a claimed trial that stays silent past the
        # grace period is taken for dead and trained twice (seen on the multi-host test rig).
        trials = owner.trials[variant.key]
        with HeartbeatThread(owner.storage, trial_id_of(trial), partial(trials.is_live, trial)):
            if on_start is not None:
                on_start(variant.name, trial)
            outcome = run_trial(owner, variant, trial)
        outcomes.append(outcome)
        if on_end is not None and outcome.status != TrialStatus.WAITING:  # a preempted trial did not end
            on_end(outcome)
    return outcomes


def _claim(
    session: QueueSession[Any], tiers: Tiers, turns: list[int], identity: dict[str, Any]
) -> tuple[TrialSession, Variant, optuna.Trial] | None:
    """(study session, variant, claimed trial) of the first tier with a claimable slot, or None.
    Within a tier the variants are visited round-robin from `turns[i]`, which moves past the
    one claimed (a different start per worker, so results arrive for every variant early)."""
    for i, tier in enumerate(tiers):
        for j in range(len(tier)):
            owner, variant = tier[(turns[i] + j) % len(tier)]
            trial = owner.trials[variant.key].claim(identity, session.waits(owner, variant))
            if trial is not None:
                turns[i] = (turns[i] + j) % len(tier) + 1
                return owner, variant, trial
    return None


def set_torch_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def quiet_lightning() -> None:
    """Fifteen trials print fifteen times Lightning's hardware banner and tips: keep
    warnings, drop the info chatter (the study prints its own progress)."""
    import logging
    import warnings

    import lightning  # noqa: F401 - sets its loggers' levels on import; override after

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*weights_only.*")


def write_worker_payload(path: Path, expanded: object, settings: StudySettings) -> Path:
    """What a worker process needs, written once by the coordinator (atomically, 0600).
    The settings' URLs carry no password (tracking.credentials): the workers find it in
    the environment they inherit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(pickle.dumps((expanded, settings)))
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    from cem_ablate.study.campaign_session import open_session

    parser = argparse.ArgumentParser(
        prog="python -m cem_ablate.study.worker",
        description="One study worker over a payload written by `cem-ablate study`.",
    )
    parser.add_argument("payload", help="the payload file (<workdir>/<study>/worker-payload-<hash>-<host>-<pid>.pkl)")
    parser.add_argument("--index", type=int, default=0, help="worker index (spreads the variants' order)")
    args = parser.parse_args(argv)
    # Load the zoo and the plugins through their entry points BEFORE unpickling: the payload's
    # option classes import their modules, and a module imported outside `load_components`
    # registers without its plugin's name and version, so this process's trial keys (code
    # fingerprint) would differ from the coordinator's and every trial it finishes would
    # look stale there.
    registry.load_components()
    expanded, settings = pickle.loads(Path(args.payload).read_bytes())  # our own file, written by write_worker_payload
    set_torch_threads(settings.threads)
    quiet_lightning()
    try:
        session = open_session(expanded, settings, worker_index=args.index)
        for outcome in work(session, args.index):
            if outcome.status == TrialStatus.WAITING:
                print(preempted_line(outcome), flush=True)
                continue
            print(
                f"{outcome.variant} {outcome.slot}: {outcome.status} {outcome.value or ''} "
                f"{outcome.reason} ({outcome.seconds:.0f} s)",
                flush=True,
            )
        if STOP.signum is not None:
            exit_soon()
            return 128 + STOP.signum  # stopped by a signal: the shell's convention
    except Exception as err:  # the process edge: one line where the cause says so, else the traceback
        from cem_ablate.training.failure import failure_of

        failure = failure_of(err, [settings.workdir], settings.tracking_uri)
        if not failure.outcome.meaning.says_one_line:  # a damaged store, a lost server, a full disk
            raise
        print(f"error: {failure.outcome.reason}", flush=True)
        return failure.outcome.meaning.exit_status
    return 0


if __name__ == "__main__":
    sys.exit(main())
