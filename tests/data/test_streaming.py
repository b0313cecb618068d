"""A streamed training split: tokenized once across ranks into the token cache, resumed without reading it."""

import json
import socket
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
import torch.distributed as dist

from cem_ablate.data.packing import ENCODE_BATCH
from cem_ablate.data.streaming import build_stream_cache, stream_tokens_needed, torch_exchange
from cem_ablate.data.tokenizer import ByteTokenizer

N_DOCS = 3 * ENCODE_BATCH + 17  # several rounds, the last one short


def documents(n: int = N_DOCS) -> list[str]:
    return [f"document {i}: " + "abcdefgh"[i % 8] * (5 + i % 13) for i in range(n)]


def stream(n: int = N_DOCS):
    docs = documents(n)
    return datasets.IterableDataset.from_generator(lambda: ({"text": d} for d in docs))


class CountingTokenizer(ByteTokenizer):
    """Bytes, recording every document it is asked to encode (one line per document)."""

    def __init__(self, log: Path):
        self.log = log

    def encode_batch(self, texts):
        with open(self.log, "a") as out:
            out.writelines(json.dumps(t) + "\n" for t in texts)
        return super().encode_batch(texts)

    def calls(self) -> list[str]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


class NoTokenizer(ByteTokenizer):
    def encode_batch(self, texts):
        raise AssertionError("a resumed run must not tokenize")


def expected_tokens(n_docs: int = N_DOCS) -> np.ndarray:
    eos = [ByteTokenizer.eos_id]
    return np.concatenate(
        [np.frombuffer(d.encode(), np.uint8).astype(np.uint16).tolist() + eos for d in documents(n_docs)]
    ).astype(np.uint16)


def test_the_cache_holds_the_stream_prefix_the_budget_needs(tmp_path):
    tokens = stream_tokens_needed(micro_batches=5, global_batch=4, block_size=32)
    cache = build_stream_cache(stream(), ByteTokenizer(), tmp_path, "s", tokens)
    assert cache.meta["tokens"] == {"train": tokens} and tokens == 5 * 4 * 32 + 1
    assert np.array_equal(cache.tokens("train"), expected_tokens()[:tokens])


def test_a_short_stream_is_cached_whole(tmp_path):
    cache = build_stream_cache(stream(40), ByteTokenizer(), tmp_path, "short", 10**9)
    assert np.array_equal(cache.tokens("train"), expected_tokens(40))


def test_resume_reads_neither_stream_nor_tokenizer(tmp_path):
    log = tmp_path / "calls.jsonl"
    first = build_stream_cache(stream(), CountingTokenizer(log), tmp_path, "s", 10**9)
    assert len(CountingTokenizer(log).calls()) == N_DOCS

    def no_stream():
        raise AssertionError("a resumed run must not read the stream")
        yield

    again = build_stream_cache(no_stream(), NoTokenizer(), tmp_path, "s", 10**9)
    assert again.folder == first.folder and np.array_equal(again.tokens("train"), first.tokens("train"))


def _rank_main(rank: int, world: int, port: int, root: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        # Each rank its own cache folder (machines without a shared disk): both write.
        build_stream_cache(
            stream(),
            CountingTokenizer(Path(root) / f"calls{rank}.jsonl"),
            Path(root) / f"r{rank}",
            "s",
            10**9,
            rank=rank,
            world_size=world,
            writer=True,
            exchange=torch_exchange(),
        )
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_tokenize_each_document_once_and_build_the_same_cache(tmp_path):
    torch.multiprocessing.spawn(_rank_main, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    calls = [CountingTokenizer(tmp_path / f"calls{r}.jsonl").calls() for r in range(2)]
    assert sorted(calls[0] + calls[1]) == sorted(documents())  # every document once, across ranks
    assert abs(len(calls[0]) - len(calls[1])) <= ENCODE_BATCH  # half the work each
    single = build_stream_cache(stream(), ByteTokenizer(), tmp_path / "single", "s", 10**9)
    for r in range(2):
        cache = next((tmp_path / f"r{r}").rglob("meta.json")).parent
        assert np.array_equal(np.memmap(cache / "train.bin", dtype="uint16", mode="r"), single.tokens("train"))
