"""Blocks packed on the fly from a streamed dataset: resumable and dealt across ranks."""

import datasets
import torch

from cem_ablate.data.streaming import StreamedBlocks
from cem_ablate.data.tokenizer import ByteTokenizer


def stream():
    docs = [{"text": f"document {i}: " + "abcdefgh"[i % 8] * (5 + i % 13)} for i in range(60)]
    return datasets.IterableDataset.from_generator(lambda: iter(docs))


def blocks(start=0, end=12, rank=0, world=1, b=2):
    return [x for x, _ in StreamedBlocks(stream(), ByteTokenizer(), 16, b, seed=3, end_batch=end,
                                         start=lambda: start, rank=rank, world_size=world)]


def test_resumed_stream_continues_the_uninterrupted_one():
    full = blocks()
    assert len(full) == 12 * 2
    assert all(torch.equal(a, b) for a, b in zip(blocks(start=5), full[5 * 2:]))


def test_ranks_read_disjoint_blocks_of_the_same_global_batches():
    one = blocks(b=4, end=6)
    r0, r1 = blocks(b=2, end=6, rank=0, world=2), blocks(b=2, end=6, rank=1, world=2)
    for m in range(6):
        merged = r0[2 * m : 2 * m + 2] + r1[2 * m : 2 * m + 2]
        assert all(torch.equal(a, b) for a, b in zip(merged, one[4 * m : 4 * m + 4]))
