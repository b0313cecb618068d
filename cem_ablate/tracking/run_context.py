"""What MLflow itself records about a run: source and git tags, system metrics.

- `source_tags()`: MLflow's own context providers (`resolve_tags`: user, source name
  and type, and git when the entry point lives in a repository). `cem-ablate` is a
  console script outside the repository, so MLflow's git provider finds nothing; the
  commit is then read with MLflow's own git helper from the installed package's
  folder (an editable install: the working tree the code runs from), with
  `cem_ablate.git_dirty` (`git status --porcelain` there: uncommitted changes).
- `system_metrics(run_id)`: `SystemMetricsMonitor`, the thread behind
  `mlflow.start_run(log_system_metrics=True)`, on an explicit run and store (no global
  active run: a study's trial run is created by the tracker, trained in the engine).
  CPU, memory, disk and network through psutil; GPU when nvidia-ml-py is installed.
  Sampling every `SAMPLING_S` seconds (MLflow's env var
  MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL overrides it).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

from cem_ablate.tracking import tags as T

SAMPLING_S = 5.0
GIT_COMMIT, GIT_BRANCH, GIT_REPO_URL = (
    "mlflow.source.git.commit",
    "mlflow.source.git.branch",
    "mlflow.source.git.repoURL",
)


@functools.cache
def source_tags() -> dict[str, str]:
    from mlflow.tracking.context.registry import resolve_tags
    from mlflow.utils import git_utils

    tags = dict(resolve_tags({}))
    package = str(Path(__file__).resolve().parents[1])
    if GIT_COMMIT not in tags:
        for key, read in (
            (GIT_COMMIT, git_utils.get_git_commit),
            (GIT_BRANCH, git_utils.get_git_branch),
            (GIT_REPO_URL, git_utils.get_git_repo_url),
        ):
            value = read(package)
            if value:
                tags[key] = value
    if GIT_COMMIT in tags:
        dirty = git_dirty(package)
        if dirty is not None:
            tags[T.GIT_DIRTY] = "true" if dirty else "false"
    return tags


def git_dirty(folder: str) -> bool | None:
    """True if the repository holding `folder` has uncommitted changes (`git status
    --porcelain`: modified, staged or untracked files); None without git or a repository."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain"], cwd=folder, capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.strip())


@contextlib.contextmanager
def system_metrics(run_id: str, tracking_uri: str, resume: bool = True, guard: Callable[[], None] | None = None):
    """Log system metrics (`system/...`) into `run_id` while the block runs. `guard` is
    called before every write and raises when this process lost its claim on the run
    (`training.lease`): then the samples are dropped, not logged."""
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    from cem_ablate.tracking.credentials import with_password

    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
    monitor = SystemMetricsMonitor(
        run_id, sampling_interval=SAMPLING_S, resume_logging=resume, tracking_uri=with_password(tracking_uri)
    )
    if guard is not None:  # every write of the monitor is a flush of its batch logger
        monitor.mlflow_logger = _guarded_batch_logger(run_id, tracking_uri, guard)
    monitor.start()
    try:
        yield monitor
    finally:
        monitor.finish()
        _publish_last_window(monitor)


def _guarded_batch_logger(run_id: str, tracking_uri: str, guard: Callable[[], None]):
    from mlflow.utils.autologging_utils import BatchMetricsLogger

    class GuardedBatchMetricsLogger(BatchMetricsLogger):
        def flush(self):
            try:
                guard()
            except Exception:  # noqa: BLE001 - fenced: the run's points are the live attempt's
                self.data = []
                return
            super().flush()

    return GuardedBatchMetricsLogger(run_id, tracking_uri=tracking_uri)


def _publish_last_window(monitor) -> None:
    """MLflow's loop drops the samples of its last, unfinished interval, so a run
    shorter than one interval would log no system metrics at all: log them."""
    try:
        metrics = monitor.aggregate_metrics()
        if metrics:
            monitor.publish_metrics(metrics)
            monitor.mlflow_logger.flush()
    except Exception as err:  # noqa: BLE001  system metrics never fail a run
        from cem_ablate.tracking.disk_space import out_of_space

        # A full disk is said once, by the process's own error line (tracking.disk_space): here
        # only at debug level, so that line stays the one line the user reads.
        level = logging.DEBUG if out_of_space(err) else logging.WARNING
        logging.getLogger(__name__).log(
            level, "the last window of system metrics was not logged (%s: %s)", type(err).__name__, err
        )
