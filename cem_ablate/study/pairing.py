"""Whether a variant and its baseline are paired by seed: checked, not assumed.

Seed s gives two variants the same initialization and data order only where their
code makes it so: T = 1 vs T = 2 of one layer build the same weights in the same
order, but CEM attention vs Llama attention draw different numbers of random values,
so every parameter built after the attention differs (their per-seed results were
even measured anti-correlated; see docs/lab-notes/from-code-comments.md). A paired
t-test there is not a valid test.

So the platform builds both models the way training initializes them (the engine
seeds with `training.seeding.seed_run(seed)` and then builds the network,
`training.networks.build_network`) and compares every parameter the two share (same
name and shape): all identical, and the same data config (the same data order for a
seed), means paired. The data module the engine builds between seeding and the model
is the same for two variants with one data config, so whatever random numbers it
draws are the same for both and do not change the answer.

Done once per variant/baseline pair per study run by the coordinator (`pair_study`):
at paper sizes that builds two full models on CPU once (seconds, and memory for two
models), which is cheap next to one trial.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cem_ablate.training.config import RunConfig

if TYPE_CHECKING:
    from cem_ablate.study.variants import Variant

PAIRED, UNPAIRED = "paired", "unpaired"
CHECK_SEED = 0  # model construction does not branch on the seed: one seed decides for all


@dataclass(frozen=True)
class Pairing:
    paired: bool
    reason: str  # one line: why (shown in stats.json and the report)

    @property
    def label(self) -> str:
        return PAIRED if self.paired else UNPAIRED


@contextlib.contextmanager
def _rng_preserved() -> Iterator[None]:
    """Seeding is global: the coordinator may train trials in this same process next."""
    import numpy as np
    import torch

    from cem_ablate.training.seeding import SEED_ENV

    py_state, np_state = random.getstate(), np.random.get_state()
    env = {k: os.environ.get(k) for k in SEED_ENV}
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
            for k, v in env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def initial_parameters(cfg: RunConfig, seed: int = CHECK_SEED) -> dict:
    """name -> initial value of every parameter of `cfg`'s network under `seed`, as the
    training engine seeds and builds it (engine `_train`)."""
    import torch

    from cem_ablate.data.tokenizer import tokenizer_vocab_size
    from cem_ablate.training.networks import build_network
    from cem_ablate.training.seeding import seed_run

    vocab_size = tokenizer_vocab_size(cfg.data)
    with _rng_preserved(), torch.device("cpu"):
        seed_run(seed)
        model, _ = build_network(cfg, vocab_size)
        return {name: p.detach() for name, p in model.named_parameters()}


def check_pairing(variant: RunConfig, baseline: RunConfig) -> Pairing:
    """Paired iff the same data order and identical initial values of every shared parameter."""
    import torch

    if variant.data != baseline.data or variant.train.batch_size != baseline.train.batch_size:
        return Pairing(False, "different data or batch size: a seed does not give the same data order")
    mine, theirs = initial_parameters(variant), initial_parameters(baseline)
    shared = [n for n in mine if n in theirs and mine[n].shape == theirs[n].shape]
    if not shared:
        return Pairing(False, "no shared parameters")
    differ = [n for n in shared if not torch.equal(mine[n], theirs[n])]
    if differ:
        return Pairing(False, f"{len(differ)} of {len(shared)} shared parameters start different ({differ[0]})")
    return Pairing(True, f"all {len(shared)} shared parameters start identical under one seed")


def pair_study(variants: Sequence[Variant]) -> dict[tuple[str, str], Pairing]:
    """(variant key, baseline name) -> Pairing for every comparison of the study's variants
    (`study.variants.Variant`); each distinct pair of configs is checked once."""
    by_key = {v.key: v for v in variants}
    checked: dict[tuple[str, str], Pairing] = {}
    out = {}
    for v in variants:
        for name, base_key in v.baselines.items():
            if base_key not in by_key:
                continue
            if (v.key, base_key) not in checked:
                checked[(v.key, base_key)] = check_pairing(v.config, by_key[base_key].config)
            out[(v.key, name)] = checked[(v.key, base_key)]
    return out
