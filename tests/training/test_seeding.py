"""training.seeding.seed_run is Lightning's seed_everything(seed, workers=True) without the
import: every generator's state and both environment variables equal Lightning's."""

import os
import random

import lightning as L
import numpy as np
import pytest
import torch

from cem_ablate.training.seeding import seed_run


def _state() -> tuple:
    np_state = np.random.get_state()
    return (
        random.getstate(),
        np_state[0],
        np_state[1].tolist(),
        np_state[2:],
        torch.get_rng_state().tolist(),
        os.environ.get("PL_GLOBAL_SEED"),
        os.environ.get("PL_SEED_WORKERS"),
    )


@pytest.mark.parametrize("seed", [0, 1, 1234, 2**32 - 1])
def test_seed_run_leaves_the_state_lightnings_seed_everything_leaves(seed, monkeypatch):
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    seed_run(seed)
    ours = _state()
    random.seed(seed + 1), np.random.seed(seed % 7), torch.manual_seed(seed + 2)  # disturb every generator
    monkeypatch.setenv("PL_SEED_WORKERS", "0")
    L.seed_everything(seed, workers=True, verbose=False)
    assert _state() == ours
    assert ours[-2:] == (str(seed), "1")
    # and the draws that follow are the same (what building a model consumes)
    seed_run(seed)
    a = (torch.randn(5), np.random.rand(3), random.random())
    L.seed_everything(seed, workers=True, verbose=False)
    b = (torch.randn(5), np.random.rand(3), random.random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]


def test_the_pairing_check_does_not_import_lightning():
    """The coordinator and `cem-ablate report` build both models of each pair to check the
    pairing: that must not import Lightning (seconds a process)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from cem_ablate.study.pairing import initial_parameters\n"
        "from cem_ablate.training.config import parse_run_config\n"
        "cfg = parse_run_config({'model': {'d_model': 16, 'n_layers': 1, 'n_heads': 2, 'd_mlp': 32,"
        " 'max_seq_len': 16}, 'data': {'source': 'stdlib', 'tokenizer': 'byte', 'block_size': 16}})\n"
        "assert initial_parameters(cfg)\n"
        "print('lightning' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "False"
