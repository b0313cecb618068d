"""The `data:` section of a run config: what to train on and how it is cut into blocks.

Validated once at the edge (`cem_ablate.config.parse`); the data modules below
receive these frozen dataclasses and never re-check them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cem_ablate.config import require

# A tokenizer spec: "byte", "bpe:<vocab_size>", or a Hugging Face name / local path.
BPE_SPEC = re.compile(r"^bpe:(\d+)$")
BYTE_VOCAB_SIZE = 257  # 256 byte values + EOS


@dataclass(frozen=True)
class GPConfig:
    """Gaussian-process regression (docs/design/experiments.md#s9-gaussian-process-study); details in `cem_ablate.data.gp`."""

    kernel: Literal["rbf", "nonstationary"] = "rbf"  # the GP's covariance (cem_ablate/data/gp.py)
    dim: int = 10  # input dimension
    n_train: int = 2048  # examples in the training split
    n_val: int = 256  # examples in the validation split
    n_test: int = 512  # examples in the test split
    length_scale: float = 1.0  # the kernel's length scale l
    noise: float = 0.05  # std of the Gaussian noise added to the targets
    data_seed: int = 0  # the dataset is fixed per data_seed; train.seed varies the model init

    def validate(self, path: str) -> None:
        require(self.dim >= 1, f"{path}.dim", "must be at least 1.")
        for name in ("n_train", "n_val", "n_test"):
            require(getattr(self, name) >= 1, f"{path}.{name}", "must be at least 1.")
        require(self.length_scale > 0, f"{path}.length_scale", "must be positive.")
        require(self.noise >= 0, f"{path}.noise", "must be non-negative.")


@dataclass(frozen=True)
class MQARConfig:
    """Multi-query associative recall; details in `cem_ablate.data.mqar`."""

    vocab_size: int = 512  # token ids; keys from the lower half, values from the upper
    num_kv_pairs: int = 8  # key-value pairs per sequence, each queried once
    n_train: int = 20_000  # sequences in the training split
    n_val: int = 500  # sequences in the validation split
    n_test: int = 1_000  # sequences in the test split
    data_seed: int = 0  # the dataset is fixed per data_seed; train.seed varies the model init

    def validate(self, path: str) -> None:
        require(self.vocab_size >= 16, f"{path}.vocab_size", "must be at least 16.")
        require(self.num_kv_pairs >= 1, f"{path}.num_kv_pairs", "must be at least 1.")
        for name in ("n_train", "n_val", "n_test"):
            require(getattr(self, name) >= 1, f"{path}.{name}", "must be at least 1.")
        # keys come from the lower half of the vocabulary, values from the upper half
        require(
            self.num_kv_pairs <= (self.vocab_size - 1) // 2,
            f"{path}.num_kv_pairs",
            f"needs distinct keys: at most {(self.vocab_size - 1) // 2} for vocab_size {self.vocab_size}.",
        )


@dataclass(frozen=True)
class DataConfig:
    task: Literal["text", "gp", "mqar"] = "text"  # language modelling, GP regression (data.gp) or MQAR (data.mqar)
    # text: "stdlib" (offline default), a local file / folder / glob (txt, jsonl, json,
    # parquet), or a Hugging Face hub dataset id.
    source: str = "stdlib"
    subset: str | None = None  # hub dataset config name
    text_field: str = "text"  # the column holding the text (jsonl, json, parquet, hub)
    streaming: bool = False  # hub datasets too big to download (SlimPajama)
    tokenizer: str = "byte"  # "byte", "bpe:<vocab_size>" (trained on the source) or a Hugging Face name / path
    block_size: int = 128  # tokens per training sequence
    val_fraction: float = 0.05  # for sources without their own validation/test splits
    test_fraction: float = 0.05  # likewise, for the test split
    cache_dir: str | None = None  # default $CEM_ABLATE_CACHE or ~/.cache/cem-ablate
    num_workers: int = 0  # DataLoader worker processes; 0 loads in the training process
    gp: GPConfig = field(default_factory=GPConfig)
    mqar: MQARConfig = field(default_factory=MQARConfig)

    def validate(self, path: str) -> None:
        p = f"{path}." if path else ""
        require(self.block_size >= 2, f"{p}block_size", "must be at least 2.")
        require(self.num_workers >= 0, f"{p}num_workers", "must be non-negative.")
        for name in ("val_fraction", "test_fraction"):
            value = getattr(self, name)
            require(0 < value < 0.5, f"{p}{name}", f"must be in (0, 0.5), got {value}.")
        require(self.source.strip() != "", f"{p}source", "must not be empty.")
        spec = self.tokenizer.strip()
        require(spec != "", f"{p}tokenizer", "must be 'byte', 'bpe:<vocab_size>' or a tokenizer name.")
        if spec.startswith("bpe"):
            match = BPE_SPEC.match(spec)
            require(match is not None, f"{p}tokenizer", f"{spec!r} must look like 'bpe:4096'.")
            assert match is not None  # require raised otherwise
            require(int(match.group(1)) >= 300, f"{p}tokenizer", "a bpe vocabulary needs at least 300 entries.")
        if self.task == "text" and self.source != "stdlib" and looks_like_path(self.source):
            require(
                bool(local_files(self.source)),
                f"{p}source",
                f"{self.source!r} is not an existing file, folder or glob of txt/jsonl/json/parquet files.",
            )

    @property
    def cache_root(self) -> Path:
        return cache_root(self.cache_dir)

    def static_vocab_size(self) -> int | None:
        """The vocabulary size known without loading anything (None for HF tokenizers)."""
        if self.task == "mqar":
            return self.mqar.vocab_size
        if self.tokenizer == "byte":
            return BYTE_VOCAB_SIZE
        match = BPE_SPEC.match(self.tokenizer)
        return int(match.group(1)) if match else None


LOCAL_SUFFIXES = (".txt", ".jsonl", ".json", ".parquet")


def looks_like_path(source: str) -> bool:
    """A hub id is `name` or `owner/name`; anything else (or anything existing) is a path."""
    if Path(source).expanduser().exists() or any(ch in source for ch in "*?["):
        return True
    return source.startswith((".", "/", "~")) or source.endswith(LOCAL_SUFFIXES) or source.count("/") > 1


def local_files(source: str) -> list[Path]:
    """Data files named by a file, a folder (recursively) or a glob, sorted."""
    path = Path(source).expanduser()
    if path.is_file():
        candidates = [path]
    elif path.is_dir():
        candidates = [p for p in path.rglob("*") if p.is_file()]
    else:
        anchor = Path(path.anchor) if path.is_absolute() else Path(".")
        pattern = str(path.relative_to(anchor)) if path.is_absolute() else source
        candidates = [p for p in anchor.glob(pattern) if p.is_file()]
    return sorted(p.resolve() for p in candidates if p.suffix in LOCAL_SUFFIXES)


def cache_root(cache_dir: str | None = None) -> Path:
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get("CEM_ABLATE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "cem-ablate"
