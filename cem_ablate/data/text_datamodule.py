"""Language-modelling data: a text source, a tokenizer, packed blocks, resumable order."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from cem_ablate.data.config import DataConfig
from cem_ablate.data.datamodule import ResumableDataModule
from cem_ablate.data.packing import PackedBlocks, TokenCache, build_token_cache, existing_token_cache
from cem_ablate.data.sources import TextSource, open_text_source, source_fingerprint
from cem_ablate.data.streaming import StreamedBlocks
from cem_ablate.data.tokenizer import TextTokenizer, load_tokenizer

STREAM_EVAL_TOKENS = 1_000_000  # tokens kept (and cached) per evaluation split of a stream


class TextDataModule(ResumableDataModule):
    def __init__(self, cfg: DataConfig, **loader_options: Any):
        super().__init__(num_workers=cfg.num_workers, **loader_options)
        self.cfg = cfg
        self.source: TextSource | None = None
        self.tokenizer: TextTokenizer | None = None
        self.cache: TokenCache | None = None
        self.built_cache = False

    def prepare(self) -> None:
        """Resolve the tokenizer and reuse (or build) the token cache.

        The source itself is only opened when something must be built from it, or
        when it is streamed: a trial over a cached corpus starts without loading it.
        Idempotent; safe in every DDP rank at once (file locks inside), so the engine
        calls it before building the model, which needs the vocabulary size.
        """
        if self.cache is not None:
            return
        cfg = self.cfg
        fingerprint = source_fingerprint(cfg)
        self.tokenizer = load_tokenizer(
            cfg.tokenizer, cfg.cache_root, fingerprint,
            lambda: (row["text"] for row in self.open_source().splits["train"]),
        )
        if not cfg.streaming:
            self.cache = existing_token_cache(cfg.cache_root, fingerprint, self.tokenizer)
            if self.cache is not None:
                return
        self.open_source()
        if self.source.streaming:
            evaluation = TextSource(
                {s: self.source.splits[s] for s in ("validation", "test")},
                f"{self.source.fingerprint}-eval{STREAM_EVAL_TOKENS}",
                self.source.description,
            )
            cap = {"validation": STREAM_EVAL_TOKENS, "test": STREAM_EVAL_TOKENS}
            self.cache, self.built_cache = build_token_cache(evaluation, self.tokenizer, cfg.cache_root, max_tokens=cap)
        else:
            self.cache, self.built_cache = build_token_cache(self.source, self.tokenizer, cfg.cache_root)

    def open_source(self) -> TextSource:
        if self.source is None:
            self.source = open_text_source(self.cfg)
        return self.source

    def prepare_data(self) -> None:
        self.prepare()

    def setup(self, stage: str | None = None) -> None:
        self.prepare()

    @property
    def vocab_size(self) -> int:
        self.prepare()
        return self.tokenizer.vocab_size

    def blocks(self, split: str) -> PackedBlocks:
        self.prepare()
        return PackedBlocks(self.cache.tokens(split), self.cfg.block_size)

    def train_dataloader(self) -> DataLoader:
        if not self.cfg.streaming:
            return self.train_loader(self.blocks("train"))
        rank, world = self.rank_and_world()
        stream = StreamedBlocks(
            self.source.splits["train"], self.tokenizer, self.cfg.block_size, self.batch_size,
            self.seed, self.total_micro_batches, start=self.micro_batches_done, rank=rank, world_size=world,
        )
        return DataLoader(stream, batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return self.eval_loader(self.blocks("validation"))

    def test_dataloader(self) -> DataLoader:
        return self.eval_loader(self.blocks("test"))

    def describe(self) -> dict[str, Any]:
        """Facts about the data for logging (MLflow params/tags) and the CLI summary."""
        self.prepare()
        meta = self.cache.meta
        return {
            "corpus": meta["corpus"],
            "corpus_fingerprint": meta["corpus_fingerprint"],
            "tokenizer": self.tokenizer.spec,
            "vocab_size": self.tokenizer.vocab_size,
            "token_cache": self.cache.key,
            **{f"tokens_{split}": n for split, n in meta["tokens"].items()},
        }
