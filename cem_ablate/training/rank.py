"""Whether this process is (or will become) global rank 0, read from the launcher's env.

Needed before any Trainer exists (who claims the run folder, prints, opens the MLflow
run). The order is Lightning's own (`lightning.fabric.utilities.rank_zero._get_rank`,
which `rank_zero_only.rank` uses): RANK (torchrun, Lightning's launcher), LOCAL_RANK
(checked before SLURM_PROCID because a plain process inside an sbatch job inherits
SLURM_PROCID=0 while the ranks it launches carry LOCAL_RANK), SLURM_PROCID (srun
tasks), JSM_NAMESPACE_RANK (LSF). LOCAL_RANK is only rank 0 on node 0, hence NODE_RANK.
"""

from __future__ import annotations

import os

# The variables Lightning's `_get_rank` reads: without any of them it answers "no
# launcher" (rank 0), so the slow Lightning import is skipped (dry runs, --help).
_LAUNCHER_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def launcher_rank() -> int:
    """The rank Lightning reads from the environment (0 when no launcher set one)."""
    if not any(name in os.environ for name in _LAUNCHER_RANK_VARIABLES):
        return 0
    from lightning.fabric.utilities.rank_zero import _get_rank

    return _get_rank() or 0


def is_global_rank_zero() -> bool:
    return launcher_rank() == 0 and int(os.environ.get("NODE_RANK", 0)) == 0
