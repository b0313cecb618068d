"""Multi-query associative recall (MQAR), the standard synthetic probe of token mixers.

An example of length L = block_size (+1 for the shifted targets), vocabulary V:

    k1 v1 k2 v2 ... kP vP | 0 0 kσ1 vσ1 0 0 0 kσ2 vσ2 ... 0
    \\___ P key-value pairs _/ \\____ every key queried once, at random slots ____/

Keys are distinct ids from [1, V/2), values ids from [V/2, V) drawn with
replacement, 0 fills the gaps. Each query key is followed by its value (teacher
forcing, as in Zoology); the model is scored only where it must produce a value
from a query key: targets are the next token at query positions and IGNORE (-100)
elsewhere. Metric: recall accuracy over those positions. Train, validation and test
sets are generated from (data_seed, split) with numpy: deterministic per seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

from cem_ablate.data.config import DataConfig, MQARConfig
from cem_ablate.data.datamodule import InMemorySplitsDataModule

IGNORE_INDEX = -100
SPLIT_INDEX = {"train": 0, "validation": 1, "test": 2}


def generate_mqar(cfg: MQARConfig, seq_len: int, n: int, seed: int | list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(inputs (n, seq_len), targets (n, seq_len)) as int64."""
    rng = np.random.default_rng(seed)
    P, V = cfg.num_kv_pairs, cfg.vocab_size
    half = V // 2
    keys = np.argsort(rng.random((n, half - 1)), axis=1)[:, :P] + 1  # distinct keys per example
    values = rng.integers(half, V, size=(n, P))
    seq = np.zeros((n, seq_len + 1), dtype=np.int64)
    seq[:, 0 : 2 * P : 2] = keys
    seq[:, 1 : 2 * P : 2] = values
    # Query region: (seq_len + 1 - 2P) // 2 two-token slots; P of them get (key, value).
    n_slots = (seq_len + 1 - 2 * P) // 2
    slots = np.argsort(rng.random((n, n_slots)), axis=1)[:, :P]
    order = np.argsort(rng.random((n, P)), axis=1)  # which pair each query asks for
    rows = np.arange(n)[:, None]
    query_pos = 2 * P + 2 * slots
    seq[rows, query_pos] = keys[rows, order]
    seq[rows, query_pos + 1] = values[rows, order]
    inputs, targets = seq[:, :-1], np.full((n, seq_len), IGNORE_INDEX, dtype=np.int64)
    targets[rows, query_pos] = seq[rows, query_pos + 1]
    return inputs, targets


class MQARDataModule(InMemorySplitsDataModule):
    def __init__(self, cfg: DataConfig, **loader_options: Any):
        super().__init__(num_workers=cfg.num_workers, **loader_options)
        self.cfg = cfg.mqar
        self.seq_len = cfg.block_size

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        sizes = {"train": self.cfg.n_train, "validation": self.cfg.n_val, "test": self.cfg.n_test}
        self.splits = {}
        for split, n in sizes.items():
            x, y = generate_mqar(self.cfg, self.seq_len, n, seed=[self.cfg.data_seed, SPLIT_INDEX[split]])
            self.splits[split] = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

    def describe(self) -> dict[str, Any]:
        c = self.cfg
        return {
            "corpus": f"MQAR, vocab {c.vocab_size}, {c.num_kv_pairs} key-value pairs, length {self.seq_len}, "
            f"data seed {c.data_seed}",
            "vocab_size": c.vocab_size,
            "examples_train": c.n_train,
        }
