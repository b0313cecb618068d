"""Put a SLURM job back in the queue when its time limit is near.

SLURM warns a job before its time limit only when asked (`#SBATCH --signal=USR1@90`:
SIGUSR1 90 s before the end) and requeues it on its own only when it is preempted
(`--requeue` with a requeueing preemption mode); a job that reaches its time limit just
ends. So a study stopped by SIGUSR1 inside a SLURM job requeues it, as Lightning's
`SLURMEnvironment(auto_requeue=True)` does for one training run (the same `scontrol
requeue`, the same job id for array tasks): the requeued job reruns the same command,
which resumes every trial that was queued again with its checkpoint.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping


def slurm_job_id(env: Mapping[str, str] = os.environ) -> str | None:
    """The id `scontrol requeue` takes: `<array job>_<task>` for an array task."""
    array_job = env.get("SLURM_ARRAY_JOB_ID")
    if array_job and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{array_job}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


def requeue_slurm_job(echo: Callable[[str], object]) -> bool:
    """`scontrol requeue` this SLURM job (False, saying why, when it could not be)."""
    job = slurm_job_id()
    if job is None:
        return False  # not a SLURM job: nothing to requeue
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        echo(f"could not requeue SLURM job {job}: {err}")
        return False
    if done.returncode != 0:
        echo(f"could not requeue SLURM job {job}: {(done.stderr or done.stdout).strip() or done.returncode}")
        return False
    echo(f"requeued SLURM job {job}: the requeued job resumes the unfinished trials")
    return True
