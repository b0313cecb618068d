"""Training blocks packed on the fly from a streamed dataset (SlimPajama-scale sources).

Nothing is cached for the training split of a streamed source: documents arrive in
a seeded shuffled order (`IterableDataset.shuffle`, reshuffled per pass), are
tokenized, joined with EOS and cut into blocks as they come. Blocks are dealt to
ranks exactly like `StreamBatchSampler` deals positions: global block k belongs to
micro-batch k // (b·W) and rank (k // b) mod W. Resume skips the blocks already
consumed, which re-reads (but does not train on) them: exact, at the cost of
re-tokenizing the skipped prefix. Every rank reads the whole stream and keeps its own
blocks, so the data order does not depend on how the source is sharded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset

from cem_ablate.data.tokenizer import TextTokenizer

SHUFFLE_BUFFER = 10_000  # documents


class StreamedBlocks(IterableDataset):
    def __init__(
        self,
        ds: Any,
        tokenizer: TextTokenizer,
        block_size: int,
        batch_size: int,
        seed: int,
        end_batch: int,
        start: Callable[[], int] = lambda: 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.ds = ds
        self.tokenizer = tokenizer
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed
        self.start = start  # micro-batches already consumed, asked when iteration begins
        self.end_batch = end_batch
        self.rank = rank
        self.world_size = world_size

    def _blocks(self) -> Iterator[np.ndarray]:
        B = self.block_size
        pass_index = 0
        while True:
            stream = self.ds.shuffle(seed=self.seed, buffer_size=SHUFFLE_BUFFER)
            stream.set_epoch(pass_index)
            buffer = np.empty(0, dtype=np.int64)
            produced = False
            for row in stream:
                (ids,) = self.tokenizer.encode_batch([row["text"]])
                buffer = np.concatenate([buffer, ids.astype(np.int64), [self.tokenizer.eos_id]])
                while len(buffer) >= B + 1:
                    yield buffer[: B + 1]
                    buffer = buffer[B:]
                    produced = True
            if not produced:
                raise ValueError("the streamed training split yields less than one block")
            pass_index += 1

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        per_batch = self.batch_size * self.world_size
        start = self.start()
        for k, block in enumerate(self._blocks()):
            m, within = divmod(k, per_batch)
            if m >= self.end_batch:
                return
            if m >= start and within // self.batch_size == self.rank:
                chunk = torch.from_numpy(block)
                yield chunk[:-1], chunk[1:]
