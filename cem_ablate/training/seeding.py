"""How a run seeds its random number generators: the engine before it builds a run, and the
pairing check (study/pairing.py), which must build the same initial weights.

This is what `lightning.seed_everything(seed, workers=True, verbose=False)` does
(lightning 2.6, fabric/utilities/seed.py), written out so that seeding does not import
Lightning: the import costs a process seconds on 2 cores (it imports torchmetrics, which
imports transformers and scipy.signal, and torch._dynamo), and a
study's coordinator and `cem-ablate report` paid it only to seed the pairing check. The
two environment variables are Lightning's: its Trainer reads PL_SEED_WORKERS to seed
DataLoader workers, and PL_GLOBAL_SEED is the seed it reports. tests/training/test_seeding.py
checks every generator's state and both variables against Lightning's own function.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

SEED_ENV = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS")  # what seed_run sets besides the generators


def seed_run(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators (every device) with `seed`."""
    global_seed, seed_workers = SEED_ENV
    os.environ[global_seed] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ[seed_workers] = "1"
