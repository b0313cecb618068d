"""`cem-ablate study FILE`: prepare the stores, run the workers, show progress, finish.

With one worker the trials run in this process (the engine's progress bar shows).
With `--workers N` this process starts N worker processes (`python -m
cem_ablate.study.worker <plan> --index i`, the plan being the validated study pickled
once: workers parse nothing again), each with its share of the CPU threads and its
output in `<workdir>/<study>/logs/worker-<i>.log`, and prints study-level progress read
from the storage. Workers die with the coordinator (Linux: PR_SET_PDEATHSIG), so a killed study
leaves no orphan training; rerunning the same command resumes it. Several machines
run the same command against one `--storage` / `--tracking-uri` to share the work.

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
import subprocess
import sys
import time
from pathlib import Path

from cem_ablate.study.progress import changes, snapshot
from cem_ablate.study.sequential import add_seeds
from cem_ablate.study.session import StudySession, StudySettings
from cem_ablate.study.summary import StudyPublisher
from cem_ablate.config.trial_status import FINAL_STATES, TrialStatus
from cem_ablate.study.variants import ExpandedStudy
from cem_ablate.study.worker import quiet_lightning, set_torch_threads, write_plan
from cem_ablate.tracking.store import shown_url
from cem_ablate.training.child_process import die_with_parent

POLL_S = 2.0


def threads_per_worker(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


def worker_env(threads: int) -> dict[str, str]:
    """A worker's environment: its threads, and unbuffered stdout/stderr so its log
    (a file, which Python would block-buffer) holds every line even after kill -9."""
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")


def run_study(expanded: ExpandedStudy, settings: StudySettings, workers: int, echo=print) -> int:
    """Run every unfinished trial; 0 when every trial finished or diverged (a result),
    1 when some are unfinished or failed (an error worth a look; a rerun retries them)."""
    from cem_ablate.study.pairing import pair_study

    session = StudySession(expanded, settings)
    session.prepare()
    # Once per study run: which comparisons are paired by seed (builds each pair's models once).
    publisher = StudyPublisher(session, pair_study(session.variants))
    before = snapshot(session)
    echo(f"study {expanded.spec.name}: {len(session.variants)} variants, {before.total} trials; "
         f"storage {shown_url(settings.storage.url)}; tracking {shown_url(settings.tracking_uri)}")
    echo(before.line())
    if before.complete:
        echo("every trial is already done")
    while True:
        if not snapshot(session).complete and workers == 1:
            _run_here(session, publisher, echo)
        elif not snapshot(session).complete:
            _run_workers(session, publisher, workers, echo)
        # Sequential seeds: a seed more to each unresolved pair, then run those (study.sequential).
        added = add_seeds(session, publisher) if snapshot(session).complete else []
        for line in added:
            echo(line)
        if not added:
            break
    publisher.publish()  # parents get the final fit, verdicts and status (a no-op if nothing changed)
    after = snapshot(session)
    echo(after.line())
    if not after.complete:
        echo(f"{after.total - after.done} trials unfinished: rerun the same command to resume them")
        return 1
    if after.slot_counts[TrialStatus.FAILED]:
        echo(f"{after.slot_counts[TrialStatus.FAILED]} trials failed (reasons in the report and the worker output); "
             "rerunning the same command retries them once")
        return 1
    return 0


def _run_here(session: StudySession, publisher: StudyPublisher, echo) -> None:
    from cem_ablate.study.worker import work

    import torch

    previous_threads = torch.get_num_threads()  # restored: the caller may be a notebook or a test
    set_torch_threads(session.settings.threads)
    quiet_lightning()
    state = {"snap": snapshot(session)}

    def report(*_):
        snap = snapshot(session)
        for line in changes(state["snap"], snap):
            echo(line)
        echo(snap.line())
        state["snap"] = snap

    def ended(outcome):
        report()
        publisher.publish()  # the variant's results changed

    try:
        work(session, 0, on_start=report, on_end=ended)
    finally:
        torch.set_num_threads(previous_threads)


def _run_workers(session: StudySession, publisher: StudyPublisher, workers: int, echo) -> None:
    study_dir = session.study_dir
    log_dir = study_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    settings = session.settings
    threads = settings.threads or threads_per_worker(workers)
    plan = write_plan(study_dir / f"plan-{session.expanded.study_hash}.pkl", session.expanded,
                      dataclasses.replace(settings, threads=threads, progress=False))
    env = worker_env(threads)
    procs = []
    for i in range(workers):
        cmd = [sys.executable, "-m", "cem_ablate.study.worker", str(plan), "--index", str(i)]
        log = open(log_dir / f"worker-{i}.log", "a")
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       preexec_fn=die_with_parent), log, i))
    echo(f"{workers} workers, {threads} threads each; logs in {log_dir}")
    snap = snapshot(session)
    try:
        while any(p.poll() is None for p, _, _ in procs):
            time.sleep(POLL_S)
            new = snapshot(session)
            lines = changes(snap, new)
            for line in lines:
                echo(line)
            if lines:
                echo(new.line())
                if _ended(snap, new):
                    publisher.publish()  # some variant's results changed
            snap = new
    except KeyboardInterrupt:
        for p, _, _ in procs:
            p.send_signal(signal.SIGINT)
        for p, _, _ in procs:
            p.wait()
        raise
    finally:
        for _, log, _ in procs:
            log.close()
    for p, _, i in procs:
        if p.returncode != 0:
            tail = _tail(log_dir / f"worker-{i}.log")
            echo(f"worker {i} exited with code {p.returncode}: {tail}")


def _ended(before, after) -> bool:
    """Whether a trial reached a final state between two snapshots."""
    return any(point.status in FINAL_STATES
               and (key not in before.trials or before.trials[key][1].status != point.status)
               for key, (_, point) in after.trials.items())


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text().strip().splitlines()[-lines:])
    except OSError:
        return ""
