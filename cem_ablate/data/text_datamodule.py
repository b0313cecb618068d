"""Language-modelling data: a text source, a tokenizer, packed blocks, resumable order."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from cem_ablate.data.config import DataConfig
from cem_ablate.data.datamodule import ResumableDataModule
from cem_ablate.data.packing import PackedBlocks, TokenCache, build_token_cache, existing_token_cache
from cem_ablate.data.sources import TextSource, open_text_source, source_fingerprint
from cem_ablate.data.streaming import (
    build_stream_cache,
    single_exchange,
    stream_fingerprint,
    stream_tokens_needed,
    torch_exchange,
)
from cem_ablate.data.tokenizer import TextTokenizer, load_tokenizer

STREAM_EVAL_TOKENS = 1_000_000  # tokens kept (and cached) per evaluation split of a stream


class TextDataModule(ResumableDataModule):
    def __init__(self, cfg: DataConfig, **loader_options: Any):
        super().__init__(num_workers=cfg.num_workers, **loader_options)
        self.cfg = cfg
        self.source: TextSource | None = None
        self.tokenizer: TextTokenizer | None = None
        self.cache: TokenCache | None = None  # train (offline) or validation/test (streamed) splits
        self.stream_cache: TokenCache | None = None  # the streamed train split's prefix, built in setup
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
            cfg.tokenizer,
            cfg.cache_root,
            fingerprint,
            lambda: (row["text"] for row in self.open_source().splits["train"]),
        )
        if not cfg.streaming:
            self.cache = existing_token_cache(cfg.cache_root, fingerprint, self.tokenizer)
            if self.cache is not None:
                return
        source = self.open_source()
        if source.streaming:
            evaluation = TextSource(
                {s: source.splits[s] for s in ("validation", "test")},
                f"{source.fingerprint}-eval{STREAM_EVAL_TOKENS}",
                source.description,
            )
            cap = {"validation": STREAM_EVAL_TOKENS, "test": STREAM_EVAL_TOKENS}
            self.cache, self.built_cache = build_token_cache(evaluation, self.tokenizer, cfg.cache_root, max_tokens=cap)
        else:
            self.cache, self.built_cache = build_token_cache(source, self.tokenizer, cfg.cache_root)

    def open_source(self) -> TextSource:
        if self.source is None:
            self.source = open_text_source(self.cfg)
        return self.source

    def prepare_data(self) -> None:
        self.prepare()

    def setup(self, stage: str | None = None) -> None:
        """On every rank, after DDP is up: the streamed train split is tokenized here,
        1/W of it per rank (`data.streaming`)."""
        self.prepare()
        if self.cfg.streaming and self.stream_cache is None and stage in (None, "fit"):
            self.stream_cache = self._build_stream_cache()

    def _build_stream_cache(self) -> TokenCache:
        import torch.distributed as dist

        rank, world = self.rank_and_world()
        local_rank = self.trainer.local_rank if self.trainer is not None else 0
        tokens = stream_tokens_needed(self.total_micro_batches, self.batch_size * world, self.cfg.block_size)
        distributed = world > 1 and dist.is_available() and dist.is_initialized()
        source = self.open_source()
        return build_stream_cache(
            source.splits["train"],
            self.prepared_tokenizer(),
            self.cfg.cache_root,
            stream_fingerprint(source.fingerprint, tokens),
            tokens,
            description=f"{source.description}, first {tokens:,} training tokens",
            rank=rank if distributed else 0,
            world_size=world if distributed else 1,
            writer=local_rank == 0,
            exchange=torch_exchange() if distributed else single_exchange,
        )

    def prepared_tokenizer(self) -> TextTokenizer:
        self.prepare()
        assert self.tokenizer is not None  # prepare resolves it before any cache
        return self.tokenizer

    def prepared_cache(self) -> TokenCache:
        self.prepare()
        assert self.cache is not None  # prepare reuses or builds it
        return self.cache

    @property
    def vocab_size(self) -> int:
        return self.prepared_tokenizer().vocab_size

    def blocks(self, split: str) -> PackedBlocks:
        return PackedBlocks(self.prepared_cache().tokens(split), self.cfg.block_size)

    def train_dataloader(self) -> DataLoader:
        if not self.cfg.streaming:
            return self.train_loader(self.blocks("train"))
        if self.stream_cache is None:
            self.setup("fit")
        assert self.stream_cache is not None  # setup("fit") builds it for a streamed source
        return self.train_loader(PackedBlocks(self.stream_cache.tokens("train"), self.cfg.block_size))

    def val_dataloader(self) -> DataLoader:
        return self.eval_loader(self.blocks("validation"))

    def test_dataloader(self) -> DataLoader:
        return self.eval_loader(self.blocks("test"))

    def describe(self) -> dict[str, Any]:
        """Facts about the data for logging (MLflow params/tags) and the CLI summary."""
        cache, tokenizer = self.prepared_cache(), self.prepared_tokenizer()
        meta = cache.meta
        return {
            "corpus": meta["corpus"],
            "corpus_fingerprint": meta["corpus_fingerprint"],
            "tokenizer": tokenizer.spec,
            "vocab_size": tokenizer.vocab_size,
            "token_cache": cache.key,
            **{f"tokens_{split}": n for split, n in meta["tokens"].items()},
        }
