"""Packing (docs/design/experiments.md#s7-training-recipe): documents joined with EOS into one token stream, cut into blocks.

The tokenized stream of each split is cached on disk as a flat array of token ids
(uint16 when the vocabulary allows, else uint32) and memory-mapped by every trial
and DDP rank. The cache key is (corpus fingerprint, tokenizer fingerprint): block
size is not part of it because a block is a view of the flat stream (block i of
size B holds tokens [iB, iB + B] inclusive, the last one being the final target), so
every block size reuses the same cache. Each split is written to a temporary file
and renamed; `meta.json` is written last and marks the entry complete. A file lock
makes concurrent builders wait for the first one instead of tokenizing twice.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock

from cem_ablate.data.sources import SPLITS, TextSource
from cem_ablate.data.tokenizer import TextTokenizer

ENCODE_BATCH = 256  # documents per tokenizer call


@dataclass(frozen=True)
class TokenCache:
    folder: Path
    meta: dict[str, Any]

    def tokens(self, split: str) -> np.memmap:
        return np.memmap(self.folder / f"{split}.bin", dtype=self.meta["dtype"], mode="r")

    @property
    def key(self) -> str:
        return self.folder.name


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 2**16 else "uint32"


def cache_key(corpus_fingerprint: str, tokenizer_fingerprint: str) -> str:
    return hashlib.sha256(f"{corpus_fingerprint}\0{tokenizer_fingerprint}".encode()).hexdigest()[:20]


def cache_folder(cache_root: Path, corpus_fingerprint: str, tokenizer: TextTokenizer) -> Path:
    return cache_root / "tokens" / cache_key(corpus_fingerprint, tokenizer.fingerprint)


def existing_token_cache(cache_root: Path, corpus_fingerprint: str, tokenizer: TextTokenizer) -> TokenCache | None:
    """The complete cache entry, if one was built (meta.json is written last)."""
    meta = cache_folder(cache_root, corpus_fingerprint, tokenizer) / "meta.json"
    return TokenCache(meta.parent, json.loads(meta.read_text())) if meta.exists() else None


def build_token_cache(
    source: TextSource,
    tokenizer: TextTokenizer,
    cache_root: Path,
    *,
    max_tokens: dict[str, int] | None = None,
) -> tuple[TokenCache, bool]:
    """Tokenize and pack every split once; returns (cache, whether it was built now).

    `max_tokens` caps splits (used for the evaluation splits of streamed sources).
    """
    folder = cache_folder(cache_root, source.fingerprint, tokenizer)
    splits = [s for s in SPLITS if s in source.splits]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        meta_path = folder / "meta.json"
        if meta_path.exists():
            return TokenCache(folder, json.loads(meta_path.read_text())), False
        folder.mkdir(exist_ok=True)
        dtype = token_dtype(tokenizer.vocab_size)
        counts = {}
        for split in splits:
            cap = (max_tokens or {}).get(split)
            counts[split] = _write_split(source.splits[split], tokenizer, folder / f"{split}.bin", dtype, cap)
        meta = {
            "corpus": source.description,
            "corpus_fingerprint": source.fingerprint,
            "tokenizer": tokenizer.spec,
            "tokenizer_fingerprint": tokenizer.fingerprint,
            "vocab_size": tokenizer.vocab_size,
            "eos_id": tokenizer.eos_id,
            "dtype": dtype,
            "tokens": counts,
        }
        tmp = meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=2))
        tmp.replace(meta_path)
        return TokenCache(folder, meta), True


def _write_split(ds: Any, tokenizer: TextTokenizer, path: Path, dtype: str, cap: int | None) -> int:
    tmp = path.with_suffix(".tmp")
    eos = np.array([tokenizer.eos_id], dtype=dtype)
    written = 0
    with open(tmp, "wb") as out:
        for texts in text_batches(ds):
            for ids in tokenizer.encode_batch(texts):
                piece = np.concatenate([ids.astype(dtype, copy=False), eos])
                if cap is not None:
                    piece = piece[: cap - written]
                piece.tofile(out)
                written += len(piece)
            if cap is not None and written >= cap:
                break
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    return written


def text_batches(ds: Any) -> Iterator[list[str]]:
    """The documents' texts in stream order, ENCODE_BATCH per list (one tokenizer call)."""
    batch: list[str] = []
    for row in ds:
        batch.append(row["text"])
        if len(batch) == ENCODE_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


class PackedBlocks(torch.utils.data.Dataset):
    """Block i of a flat token stream: inputs tokens[iB:iB+B], targets shifted by one."""

    def __init__(self, tokens: np.ndarray, block_size: int):
        self.tokens = tokens
        self.block_size = block_size
        self.n_blocks = (len(tokens) - 1) // block_size
        if self.n_blocks < 1:
            raise ValueError(f"{len(tokens)} tokens are fewer than one block of {block_size} + 1")

    def __len__(self) -> int:
        return self.n_blocks

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.block_size
        chunk = torch.from_numpy(self.tokens[start : start + self.block_size + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]
