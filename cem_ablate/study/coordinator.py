"""`cem-ablate study FILE`: prepare the stores, run the workers, show progress, finish.

With one worker the trials run in this process (the engine's progress bar shows).
With `--workers N` this process starts N worker processes (`python -m
cem_ablate.study.worker <payload> --index i`, the payload being the validated study pickled
once: workers parse nothing again), each with its share of the CPU threads and its
output in `<workdir>/<study>/logs/worker-<i>.log`, and prints study-level progress read
from the storage. Workers die with the coordinator (Linux: PR_SET_PDEATHSIG), so a killed study
leaves no orphan training; rerunning the same command resumes it. Several machines
run the same command against one `--storage` / `--tracking-uri` to share the work.

The coordinator never waits on a worker that stopped making progress (`study.stalls`:
stopped past `--grace`, its trial failed as stale and retried by another worker): it
says so in one line, starts a replacement when no live worker is left to do the
remaining trials, and once every trial is done it kills the stalled ones and ends. A
worker stopped while it holds a local store's lock (which every other process then
waits on) is killed at once (`study.store_locks`).
Ctrl-C ends the study at once: workers get SIGTERM (the trial each trains saves a
checkpoint at its next step boundary and is queued again), those that do not exit
within `STOP_WAIT_S` (a stopped one) are killed, and the report of what finished is
printed. A press that Python swallows inside a garbage callback is honoured at the next
poll (`study.interrupt_latch`).

SIGTERM and SIGUSR1 (a cluster taking the machine back, training.preemption) stop the
study the same way: each preempted trial is named in one line with its step, and the
study exits with 128 + the signal's number. On SIGUSR1 inside a SLURM job (`#SBATCH
--signal=USR1@90`, the time-limit warning) the study requeues its job
(`study.requeue`), whose rerun resumes every preempted trial.

The coordinator, not the workers, publishes the parents' statistics, plots and
verdicts (`study.summary.StudyPublisher`) whenever a trial ends and once at the end:
a verdict is Holm-adjusted over the whole study, and a bootstrap per trial per worker
was wasted work. It checks once per run which comparisons are paired by seed
(`study.pairing`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Container
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from cem_ablate.config import ConfigError
from cem_ablate.config.trial_outcome import MEANINGS, Cause
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.config.trial_status import FINAL_STATES, TrialStatus
from cem_ablate.study.interrupt_latch import InterruptLatch
from cem_ablate.study.progress import Snapshot, changes, snapshot
from cem_ablate.study.session_protocols import Publisher, QueueSession
from cem_ablate.study.settings import StudySettings
from cem_ablate.study.stalls import fail_lapsed_claims, stalled
from cem_ablate.study.storage import sqlite_path
from cem_ablate.study.store_locks import LockWatchdog
from cem_ablate.study.variants import ExpandedStudy
from cem_ablate.study.worker import PREEMPTED, preempted_line, quiet_lightning, set_torch_threads, write_worker_payload
from cem_ablate.tracking.store import shown_url, sqlite_store_path
from cem_ablate.training.child_process import die_with_parent
from cem_ablate.training.preemption import STOP, Preempted, exit_code

if TYPE_CHECKING:
    from cem_ablate.study.campaign_session import Campaign

Echo = Callable[[str], object]  # where a study's lines go (print, or a test's list)

POLL_S = 2.0
# After Ctrl-C or a stop signal: how long workers get to checkpoint and free their trials
# before they are killed; under SLURM's default KillWait (30 s) before its SIGKILL.
STOP_WAIT_S = 20.0
INTERRUPTED = MEANINGS[Cause.INTERRUPTED].exit_status  # a study ended by Ctrl-C (config.trial_outcome)
STOPPED_BY_SIGNAL = tuple(128 + s for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT))  # a worker's exit codes


def threads_per_worker(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


def worker_env(threads: int) -> dict[str, str]:
    """A worker's environment: its threads, and unbuffered stdout/stderr so its log
    (a file, which Python would block-buffer) holds every line even after kill -9."""
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")


@dataclasses.dataclass(frozen=True)
class StudyOutcome:
    code: int  # run_study's return code
    complete: bool  # every slot reached a final state (finished, diverged or failed)


def run_study(expanded: ExpandedStudy | Campaign, settings: StudySettings, workers: int, echo: Echo = print) -> int:
    """Run every unfinished trial; 0 when every trial finished or diverged (a result),
    1 when some are unfinished or failed (an error worth a look; a rerun retries them)."""
    return run_study_outcome(expanded, settings, workers, echo).code


def run_study_outcome(
    expanded: ExpandedStudy | Campaign, settings: StudySettings, workers: int, echo: Echo = print
) -> StudyOutcome:
    """run_study, also saying whether the study's last snapshot was complete (a transfer's
    proxies must be: an lr* from an unfinished grid is a wrong number)."""
    from cem_ablate.study.campaign_session import open_session

    session = open_session(expanded, settings)
    try:
        return _run_session(session, workers, echo)
    finally:
        session.close()


def _run_session(session: QueueSession[Any], workers: int, echo: Echo) -> StudyOutcome:
    settings = session.settings
    session.prepare()
    # Once per study run: which comparisons are paired by seed (builds each pair's models once).
    publisher = session.publisher()
    before = snapshot(session)
    echo(
        f"{session.title}: {len(session.variants)} variants, {before.total} trials; "
        f"storage {shown_url(settings.storage.url)}; tracking {shown_url(settings.tracking_uri)}"
    )
    servers = _outage_windows(settings)
    if servers:
        echo(f"a server that goes away is waited for: {servers}; longer, the trials in training are queued again")
    echo(before.line())
    if before.complete:
        echo("every trial is already done")
    try:
        _run_until_done(session, publisher, workers, echo)
    except KeyboardInterrupt:
        after = snapshot(session)  # the workers are stopped: what finished is what the storage holds
        echo(after.line())
        echo(f"interrupted: {after.total - after.done} trials unfinished; rerun the same command to resume them")
        return StudyOutcome(INTERRUPTED, after.complete)
    except Preempted as stop:
        return _stopped(session, stop, echo)
    publisher.publish()  # parents get the final fit, verdicts and status (a no-op if nothing changed)
    after = snapshot(session)
    echo(after.line())
    if not after.complete:
        echo(f"{after.total - after.done} trials unfinished: rerun the same command to resume them")
        return StudyOutcome(1, False)
    if after.slot_counts[TrialStatus.FAILED]:
        echo(
            f"{after.slot_counts[TrialStatus.FAILED]} trials failed (reasons in the report and the worker output); "
            "rerunning the same command retries them once"
        )
        return StudyOutcome(1, True)
    return StudyOutcome(0, True)


def _run_until_done(session: QueueSession[Any], publisher: Publisher, workers: int, echo: Echo) -> None:
    """Run the queued trials (here or in workers), then any seeds sequential seeds add;
    SIGTERM or SIGUSR1 meanwhile raises `Preempted` once the workers stopped."""
    with STOP.listen():
        while STOP.received is None:
            if not snapshot(session).complete and workers == 1:
                _run_here(session, publisher, echo)
            elif not snapshot(session).complete:
                _run_workers(session, publisher, workers, echo)
            # Sequential seeds: a seed more to each unresolved pair, then run those (study.sequential).
            added = session.add_seeds(publisher) if snapshot(session).complete and STOP.received is None else []
            for line in added:
                echo(line)
            if not added:
                break
        if STOP.received is not None:
            raise Preempted(STOP.received, None)


def _stopped(session: QueueSession[Any], stop: Preempted, echo: Echo) -> StudyOutcome:
    """A study stopped by a signal: what is unfinished, the SLURM requeue on SIGUSR1."""
    after = snapshot(session)
    echo(after.line())
    echo(
        f"stopped by {stop.signal_name}: {after.total - after.done} trials unfinished, every trial in "
        "training saved a checkpoint; rerun the same command (or requeue the job) to resume them"
    )
    if stop.signal_name == "SIGUSR1":
        from cem_ablate.study.requeue import requeue_slurm_job

        requeue_slurm_job(echo)
    return StudyOutcome(exit_code(stop), after.complete)


def _run_here(session: QueueSession[Any], publisher: Publisher, echo: Echo) -> None:
    import torch

    from cem_ablate.study.worker import work

    previous_threads = torch.get_num_threads()  # restored: the caller may be a notebook or a test
    set_torch_threads(session.settings.threads)
    quiet_lightning()
    state = {"snap": snapshot(session)}

    def report(*_: object) -> None:
        snap = snapshot(session)
        for line in changes(state["snap"], snap):
            echo(line)
        echo(snap.line())
        state["snap"] = snap

    def ended(outcome: TrialRecord) -> None:
        report()
        publisher.publish()  # the variant's results changed

    try:
        outcomes = work(session, 0, on_start=report, on_end=ended)
    finally:
        torch.set_num_threads(previous_threads)
    for outcome in outcomes:
        if outcome.status == TrialStatus.WAITING:
            echo(preempted_line(outcome))
    if STOP.received is not None:
        raise Preempted(STOP.received, None)


@dataclasses.dataclass
class WorkerProcess:
    """A worker process the coordinator started: its process, its log file, its index."""

    process: subprocess.Popen
    log: IO[str]
    index: int
    log_start: int = 0  # where this run's lines begin in its log (logs are appended)

    def preempted_lines(self, log_dir: Path) -> list[str]:
        """The `preempted: ` lines this worker wrote in this run."""
        try:
            with open(log_dir / f"worker-{self.index}.log", "rb") as f:
                f.seek(self.log_start)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if line.startswith(PREEMPTED)]


class _WorkerPool:
    """The worker processes of one coordinator, all over its one payload file."""

    def __init__(self, payload: Path, log_dir: Path, env: dict[str, str]):
        self.payload, self.log_dir, self.env = payload, log_dir, env
        self.workers: list[WorkerProcess] = []

    def start(self, i: int | None = None) -> int:
        i = len(self.workers) if i is None else i  # a replacement takes the next unused index
        cmd = [sys.executable, "-m", "cem_ablate.study.worker", str(self.payload), "--index", str(i)]
        log = open(self.log_dir / f"worker-{i}.log", "a")
        self.workers.append(
            WorkerProcess(
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, preexec_fn=die_with_parent),
                log,
                i,
                log.tell(),
            )
        )
        return i

    def running_pids(self) -> list[int]:
        return [w.process.pid for w in list(self.workers) if w.process.returncode is None]

    def close(self, killed: Container[int]) -> None:
        """Reap the killed workers, close the logs, remove the payload."""
        for w in self.workers:
            if w.process.pid in killed:
                w.process.wait()
        for w in self.workers:
            w.log.close()
        self.payload.unlink(missing_ok=True)


def _run_workers(session: QueueSession[Any], publisher: Publisher, workers: int, echo: Echo) -> None:
    settings = session.settings
    pool = _start_workers(session, workers, echo)

    def killed_holding_lock(pid: int, db: Path) -> None:
        i = next(w.index for w in pool.workers if w.process.pid == pid)
        echo(
            f"worker {i} (pid {pid}) stopped making progress while holding the lock of {db.name}, which every "
            "other worker waits on: killed it; its trial is retried after the grace period"
        )

    databases = [sqlite_path(settings.storage.url), sqlite_store_path(settings.tracking_uri)]
    watchdog = LockWatchdog(databases, pool.running_pids, killed_holding_lock)
    snap = snapshot(session)
    reported: set[int] = set()  # pids of stalled workers already said so
    try:
        with watchdog, InterruptLatch() as latch:
            _follow(session, publisher, pool, watchdog.killed, latch, snap, reported, echo)
    except (KeyboardInterrupt, Preempted) as stop:
        _stop(pool.workers, signal.SIGUSR1 if getattr(stop, "signal_name", "") == "SIGUSR1" else signal.SIGTERM)
        for w in pool.workers:
            for line in w.preempted_lines(pool.log_dir):
                echo(line)
        raise
    finally:
        pool.close(watchdog.killed)
    _check_exits(session, pool, reported | set(watchdog.killed), echo)


def _start_workers(session: QueueSession[Any], workers: int, echo: Echo) -> _WorkerPool:
    """Write the worker payload and start `workers` worker processes over it."""
    study_dir = session.study_dir
    log_dir = study_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    settings = session.settings
    threads = settings.threads or threads_per_worker(workers)
    # One payload per coordinator (machines may share --workdir), removed when its workers end.
    name = f"worker-payload-{session.expanded.study_hash}-{socket.gethostname()}-{os.getpid()}.pkl"
    payload = write_worker_payload(
        study_dir / name, session.expanded, dataclasses.replace(settings, threads=threads, progress=False)
    )
    pool = _WorkerPool(payload, log_dir, worker_env(threads))
    for i in range(workers):
        pool.start(i)
    echo(f"{workers} workers, {threads} threads each; logs in {log_dir}")
    return pool


def _follow(
    session: QueueSession[Any],
    publisher: Publisher,
    pool: _WorkerPool,
    killed: Container[int],
    latch: InterruptLatch,
    snap: Snapshot,
    reported: set[int],
    echo: Echo,
) -> None:
    """Print the study's progress until the workers end, or only stalled ones are left
    once every trial is done (`_watch_stalls`)."""
    # The killed are reaped only at the end: an operator's SIGCONT still finds their pid.
    while any(w.process.poll() is None for w in pool.workers if w.process.pid not in killed):
        time.sleep(POLL_S)
        latch.check()  # a Ctrl-C that landed in a garbage callback during the last pass
        if STOP.received is not None:  # SIGTERM or SIGUSR1 to this process (training.preemption)
            raise Preempted(STOP.received, None)
        new = snapshot(session)
        lines = changes(snap, new)
        for line in lines:
            echo(line)
        if lines:
            echo(new.line())
            if _ended(snap, new):
                publisher.publish()  # some variant's results changed
        snap = new
        live = [w for w in pool.workers if w.process.pid not in killed]
        if _watch_stalls(session, live, reported, new.complete, pool.start, echo):
            break


def _check_exits(session: QueueSession[Any], pool: _WorkerPool, said_so: set[int], echo: Echo) -> None:
    """Say how each worker that failed ended (`said_so`: the pids of those already said
    stalled or killed); raise the workers' error when the study cannot go on."""
    errors = []  # the one `error:` line of each worker that ended on one (a full disk, a damaged store)
    for w in pool.workers:
        p, log_path = w.process, pool.log_dir / f"worker-{w.index}.log"
        killed_as_said = p.pid in said_so and p.returncode == -signal.SIGKILL
        error = _error_line(log_path) if p.returncode == 2 else None
        if error:
            errors.append(error)
        elif p.returncode in STOPPED_BY_SIGNAL:  # this worker alone was signalled: its lines say so
            for line in w.preempted_lines(pool.log_dir):
                echo(line)
        elif p.returncode != 0 and not killed_as_said:
            echo(f"worker {w.index} exited with code {p.returncode}: {_tail(log_path)}")
    if errors and not snapshot(session).complete:
        # The study cannot go on: the workers' error, once (they all met the same disk or store).
        raise ConfigError("", errors[0].removeprefix("error: "))


def _watch_stalls(
    session: QueueSession[Any],
    workers: list[WorkerProcess],
    reported: set[int],
    complete: bool,
    start: Callable[[], int],
    echo: Echo,
) -> bool:
    """Say once which workers stalled; replace them when no live worker is left for the
    remaining trials; True (stop waiting) when every trial is done and only stalled
    workers are left, which are killed."""
    fail_lapsed_claims(session)
    alive = {w.process.pid: w for w in workers if w.process.poll() is None}
    stalls = stalled(session, set(alive))
    for pid, stall in stalls.items():
        if pid not in reported:
            reported.add(pid)
            echo(
                f"worker {alive[pid].index} (pid {pid}) stopped making progress: its trial {stall.trial} had no "
                f"heartbeat for {session.settings.storage.grace_period} s and is retried; "
                "it is stopped when the trials are done"
            )
    if not stalls or len(stalls) < len(alive):
        return False
    if not complete:  # every live worker is stalled: one fresh worker does the rest
        echo(f"no worker left making progress: started worker {start()}")
        return False
    for pid in stalls:
        alive[pid].process.kill()  # SIGKILL: a stopped process never handles anything else
        alive[pid].process.wait()
    return True


def _stop(workers: list[WorkerProcess], signum: int = signal.SIGTERM) -> None:
    """Ctrl-C or a stop signal: workers checkpoint and queue their trials again on `signum`
    (SIGTERM for a Ctrl-C: a worker that got the terminal's SIGINT too records one stop,
    where a second SIGINT would interrupt it at once); those not gone within STOP_WAIT_S
    (a hung one) are killed, a SIGSTOPped one at once (it handles nothing until continued),
    so the coordinator never waits on them."""
    import psutil

    for w in workers:
        if w.process.poll() is None:
            w.process.send_signal(signum)
            try:
                if psutil.Process(w.process.pid).status() == psutil.STATUS_STOPPED:
                    w.process.kill()
            except psutil.NoSuchProcess:
                pass
    deadline = time.monotonic() + STOP_WAIT_S
    for w in workers:
        try:
            w.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.process.kill()
            w.process.wait()


def _outage_windows(settings: StudySettings) -> str:
    """How long each server of the study is waited for when it goes away ('' for local stores)."""
    from cem_ablate.tracking.credentials import is_http
    from cem_ablate.tracking.store import mlflow_outage_window

    windows = []
    if sqlite_path(settings.storage.url) is None:
        windows.append(f"storage {settings.storage.outage_s} s")
    if is_http(settings.tracking_uri):
        windows.append(f"MLflow {mlflow_outage_window():.0f} s")
    return ", ".join(windows)


def _ended(before: Snapshot, after: Snapshot) -> bool:
    """Whether a trial reached a final state between two snapshots."""
    return any(
        point.status in FINAL_STATES and (key not in before.trials or before.trials[key][1].status != point.status)
        for key, (_, point) in after.trials.items()
    )


def _error_line(path: Path) -> str | None:
    """The last `error: ` line of a worker's log (a worker ends on one line, `study.worker`)."""
    try:
        found = [line for line in path.read_text().splitlines() if line.startswith("error: ")]
    except OSError:
        return None
    return found[-1] if found else None


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text().strip().splitlines()[-lines:])
    except OSError:
        return ""
