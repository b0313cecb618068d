"""A streamed training split, tokenized once by all ranks together into the token cache.

A streamed source (SlimPajama-scale) is never downloaded whole: the run takes the
prefix of the stream its budget needs (micro-batches x global batch x block size + 1
tokens), tokenizes it once, and packs it into the same memory-mapped token cache an
offline corpus uses (`data.packing`). Training then reads blocks from the cache with
`StreamBatchSampler`, so resume is O(1): a restarted run (or another trial of the same
budget) maps the cache and starts at its step, nothing is re-tokenized.

The work is split across the DDP ranks. The stream is cut into pieces of
`ENCODE_BATCH` documents in stream order; in round t the W ranks take pieces
tW, ..., tW + W - 1, rank r tokenizing piece tW + r with one batched `encode_batch`
call, and the round's pieces are exchanged (`all_gather_object`) so that every rank
appends all of them, in piece order, to its copy of the cache. Every document is
therefore tokenized exactly once across the ranks, and the cache's content (the token
stream) is the same whatever the number of ranks. Rounds go on until the tokens
suffice or the stream ends, decided from the exchanged pieces, hence identically on
every rank. Only the first rank of each machine writes the cache (a shared
filesystem gets identical copies, renamed atomically).

Every rank still reads the text of the whole prefix (it skips the documents of other
ranks without tokenizing them): reading is cheap next to tokenizing, and sharding the
stream by files would make the document order depend on the number of ranks.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cem_ablate.data.packing import ENCODE_BATCH, TokenCache, cache_folder, text_batches, token_dtype
from cem_ablate.data.tokenizer import TextTokenizer

Exchange = Callable[[Any], list[Any]]  # every rank's object, in rank order (all_gather_object)


def stream_tokens_needed(micro_batches: int, global_batch: int, block_size: int) -> int:
    """Tokens of the stream a run reads: block i is tokens [iB, iB + B] inclusive."""
    return micro_batches * global_batch * block_size + 1


def stream_fingerprint(source_fingerprint: str, tokens: int) -> str:
    """The cache entry of a stream's prefix: its length is part of what it holds."""
    return f"{source_fingerprint}-train{tokens}"


def torch_exchange() -> Exchange:
    """Exchange through the default process group (the one Lightning's DDP set up)."""
    import torch.distributed as dist

    def exchange(obj: Any) -> list[Any]:
        out: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out

    return exchange


def single_exchange(obj: Any) -> list[Any]:
    return [obj]


def existing_stream_cache(folder: Path) -> TokenCache | None:
    meta = folder / "meta.json"
    return TokenCache(folder, json.loads(meta.read_text())) if meta.exists() else None


def build_stream_cache(
    ds: Any,
    tokenizer: TextTokenizer,
    cache_root: Path,
    fingerprint: str,
    tokens: int,
    *,
    description: str = "",
    rank: int = 0,
    world_size: int = 1,
    writer: bool = True,
    exchange: Exchange = single_exchange,
) -> TokenCache:
    """The cache of the first `tokens` tokens of stream `ds` (all of it when shorter).

    Every rank calls this at the same point (it is collective when world_size > 1);
    `writer` marks the one rank per filesystem that writes. A complete cache on every
    rank is reused without reading the stream.
    """
    folder = cache_folder(cache_root, fingerprint, tokenizer)
    cache = existing_stream_cache(folder)
    if all(exchange(cache is not None)):
        assert cache is not None  # this rank's own answer was True
        return cache
    dtype = token_dtype(tokenizer.vocab_size)
    write = writer and cache is None
    if write:
        folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"train.bin.tmp-{socket.gethostname()}-{os.getpid()}"
    written = 0
    with open(tmp, "wb") if write else open(os.devnull, "wb") as out:
        for pieces in _rounds(ds, tokenizer, dtype, rank, world_size, exchange):
            for piece in pieces:
                piece = piece[: max(tokens - written, 0)]
                piece.tofile(out)
                written += len(piece)
            if written >= tokens:
                break
        if write:
            out.flush()
            os.fsync(out.fileno())
    if not write:
        return _wait_for(folder, exchange)
    os.replace(tmp, folder / "train.bin")
    meta = {
        "corpus": description,
        "corpus_fingerprint": fingerprint,
        "tokenizer": tokenizer.spec,
        "tokenizer_fingerprint": tokenizer.fingerprint,
        "vocab_size": tokenizer.vocab_size,
        "eos_id": tokenizer.eos_id,
        "dtype": dtype,
        "tokens": {"train": written},
    }
    meta_tmp = folder / f"meta.json.tmp-{os.getpid()}"
    meta_tmp.write_text(json.dumps(meta, indent=2))
    os.replace(meta_tmp, folder / "meta.json")  # written last: marks the entry complete
    exchange(True)
    return TokenCache(folder, meta)


def _wait_for(folder: Path, exchange: Exchange) -> TokenCache:
    """A rank that does not write: its machine's writer has finished once all ranks meet."""
    exchange(True)
    cache = existing_stream_cache(folder)
    if cache is None:
        raise RuntimeError(f"no token cache at {folder}: the writer of this machine did not finish")
    return cache


def _rounds(
    ds: Any, tokenizer: TextTokenizer, dtype: str, rank: int, world_size: int, exchange: Exchange
) -> Iterator[list[np.ndarray]]:
    """Each round: the W pieces (token arrays, documents joined with EOS), in stream order."""
    eos = np.array([tokenizer.eos_id], dtype=dtype)
    documents = text_batches(ds)
    while True:
        mine: list[str] = []
        ended = False
        for r in range(world_size):
            piece = next(documents, None)
            if piece is None:
                ended = True
                break
            if r == rank:
                mine = piece
        ids = tokenizer.encode_batch(mine) if mine else []
        tokens = (
            np.concatenate([x for doc in ids for x in (doc.astype(dtype, copy=False), eos)])
            if ids
            else np.empty(0, dtype=dtype)
        )
        gathered = exchange((tokens, ended or len(mine) < ENCODE_BATCH))
        yield [t for t, _ in gathered]
        if any(last for _, last in gathered):
            return
