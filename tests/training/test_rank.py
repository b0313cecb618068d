"""Rank 0 from the launcher's environment, in Lightning's order (training.rank)."""

import pytest

from cem_ablate.training.rank import is_global_rank_zero, launcher_rank
from cem_ablate.training.run_directory import is_rank_zero_process

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "NODE_RANK")


@pytest.mark.parametrize(
    "env, rank, zero",
    [
        ({}, 0, True),
        ({"RANK": "1", "LOCAL_RANK": "0"}, 1, False),  # torchrun, second node
        ({"SLURM_PROCID": "1", "SLURM_LOCALID": "1"}, 1, False),  # srun task 1
        ({"SLURM_PROCID": "0"}, 0, True),  # srun task 0
        ({"SLURM_PROCID": "0", "LOCAL_RANK": "1"}, 1, False),  # a rank launched inside an sbatch job
        ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, 0, False),  # Lightning's launcher on node 1
        ({"NODE_RANK": "1"}, 0, False),  # the launching process on node 1
    ],
)
def test_rank_zero_follows_lightnings_order(monkeypatch, env, rank, zero):
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launcher_rank() == rank
    assert is_global_rank_zero() is zero
    assert is_rank_zero_process() is zero  # the run folder asks the same function
