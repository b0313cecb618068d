"""A batch sampler whose order is a pure function of (seed, micro-batches consumed).

This is what makes resume exact: each time iteration begins, the sampler asks where
the run stands (`start()`: micro-batches consumed = optimizer steps x accumulation,
restored from the checkpoint) and continues the stream from there, so a resumed run
sees exactly the batches the uninterrupted run would have. (Lightning alone would
restart the epoch's loader from its beginning.) Its length is always the whole run:
Lightning keeps counting batches across a mid-epoch resume, and a shorter loader
would make it end the "epoch" early and iterate again.

The training data is an endless stream of block indices: epoch e is a permutation of
all blocks drawn from (seed, e). Across ranks the stream is dealt in micro-batches:
micro-batch m of rank r holds stream positions [(m·W + r)·b, (m·W + r + 1)·b) for W
ranks and b blocks per device. The global batch at step m is therefore the same for
any (W, b) with the same W·b, and no two ranks ever read the same position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from torch.utils.data import Sampler


class StreamBatchSampler(Sampler[list[int]]):
    def __init__(
        self,
        n_items: int,
        batch_size: int,
        seed: int,
        end_batch: int,
        start: Callable[[], int] = lambda: 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        if n_items < 1:
            raise ValueError("cannot sample from an empty dataset")
        self.n_items = n_items
        self.batch_size = batch_size
        self.seed = seed
        self.end_batch = end_batch
        self.start = start
        self.rank = rank
        self.world_size = world_size
        self._epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def index_at(self, position: int) -> int:
        epoch, offset = divmod(position, self.n_items)
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_items)
            self._epoch = epoch
        return int(self._perm[offset])

    def __iter__(self) -> Iterator[list[int]]:
        b = self.batch_size
        for m in range(self.start(), self.end_batch):
            first = (m * self.world_size + self.rank) * b
            yield [self.index_at(p) for p in range(first, first + b)]

    def __len__(self) -> int:
        return self.end_batch


class ShardSampler(Sampler[int]):
    """Evaluation order: sequential, rank r reads items r, r + W, r + 2W, ..."""

    def __init__(self, n_items: int, rank: int = 0, world_size: int = 1):
        self.indices = range(rank, n_items, world_size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)
