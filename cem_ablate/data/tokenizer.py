"""Tokenizers for text data: `byte`, `bpe:<vocab_size>` (trained here) or a HF tokenizer.

All three expose the same small interface (`TextTokenizer`): a vocabulary size, the
id that ends a document (EOS, joined between documents when packing, docs/design/experiments.md#s7-training-recipe), a
fingerprint for the token cache key, and batch encoding to id lists.

`bpe:<n>` is a byte-level BPE trained with the `tokenizers` library on the training
split only, saved under the cache directory keyed by (corpus fingerprint, n), and
trained once (a file lock guards concurrent trials and DDP ranks).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
from filelock import FileLock

from cem_ablate.config import ConfigError
from cem_ablate.data.config import BPE_SPEC, BYTE_VOCAB_SIZE

EOS_TOKEN = "<|endoftext|>"


class TextTokenizer(Protocol):
    spec: str
    vocab_size: int
    eos_id: int
    fingerprint: str

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]: ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, EOS = 256: no files, no training."""

    spec = "byte"
    vocab_size = BYTE_VOCAB_SIZE
    eos_id = 256
    fingerprint = "byte"

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A `tokenizers.Tokenizer`: a BPE trained here, or a Hugging Face fast tokenizer."""

    def __init__(self, spec: str, backend, eos_id: int, vocab_size: int, fingerprint: str):
        self.spec = spec
        self._backend = backend
        self.eos_id = eos_id
        self.vocab_size = vocab_size
        self.fingerprint = fingerprint

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        encodings = self._backend.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        return self._backend.decode(list(ids))


def load_tokenizer(
    spec: str, cache_root: Path, corpus_fingerprint: str, train_texts: Callable[[], Iterator[str]]
) -> TextTokenizer:
    """Resolve a tokenizer spec; `train_texts` is only called when a BPE must be trained."""
    if spec == "byte":
        return ByteTokenizer()
    match = BPE_SPEC.match(spec)
    if match:
        return _trained_bpe(int(match.group(1)), cache_root, corpus_fingerprint, train_texts)
    return _pretrained(spec)


def _trained_bpe(
    vocab_size: int, cache_root: Path, corpus_fingerprint: str, train_texts: Callable[[], Iterator[str]]
) -> HFTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder = cache_root / "tokenizers"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bpe{vocab_size}-{corpus_fingerprint}.json"
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(
                vocab_size=vocab_size,
                special_tokens=[EOS_TOKEN],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                show_progress=False,
            )
            tok.train_from_iterator(train_texts(), trainer=trainer)
            tmp = path.with_suffix(".tmp")
            tok.save(str(tmp))
            tmp.replace(path)
    tok = Tokenizer.from_file(str(path))
    fingerprint = "bpe-" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    eos = tok.token_to_id(EOS_TOKEN)
    assert eos is not None  # a special token of the trainer, so always in the vocabulary
    # The trained vocabulary may be smaller than asked on a tiny corpus; ids stay < vocab_size.
    return HFTokenizer(f"bpe:{vocab_size}", tok, eos, vocab_size, fingerprint)


def _pretrained(spec: str) -> HFTokenizer:
    """`_load_pretrained`, once per process: a run asks for its tokenizer twice (the
    budget's vocabulary size, then the data module), and every Hub load costs a
    metadata request. A local tokenizer is loaded again when its file changes."""
    local = Path(spec).expanduser()
    file = local / "tokenizer.json" if local.is_dir() else local
    return _load_pretrained(spec, file.stat().st_mtime_ns if file.is_file() else None)


@functools.lru_cache(maxsize=8)
def _load_pretrained(spec: str, _local_mtime: int | None) -> HFTokenizer:
    """A Hugging Face tokenizer by Hub id or local folder, through `tokenizers` alone.

    `tokenizer.json` holds the vocabulary and the pipeline; the EOS token is named in
    `tokenizer_config.json` (as `transformers` reads it). `tokenizers` and
    `huggingface_hub` are runtime dependencies, so a plain install can load any fast
    tokenizer; offline, the first load of a Hub id fails with one clear message.
    """
    from tokenizers import Tokenizer

    tokenizer_file, config = _tokenizer_files(spec)
    try:
        backend = Tokenizer.from_file(str(tokenizer_file))
    except Exception as err:  # noqa: BLE001 - any parse error is the file's fault
        raise ConfigError("data.tokenizer", f"cannot read {tokenizer_file} for {spec!r}: {err}") from None
    eos_id = _eos_id(backend, config)
    if eos_id is None:
        raise ConfigError("data.tokenizer", f"tokenizer {spec!r} has no EOS token to join documents.")
    vocab = backend.get_vocab(with_added_tokens=True)
    digest = hashlib.sha256("\n".join(f"{k}\t{v}" for k, v in sorted(vocab.items())).encode())
    return HFTokenizer(
        spec, backend, eos_id, backend.get_vocab_size(with_added_tokens=True), "hf-" + digest.hexdigest()[:16]
    )


def _tokenizer_files(spec: str) -> tuple[Path, dict]:
    """(tokenizer.json, tokenizer_config.json contents) from a local folder or the Hub."""
    import json

    local = Path(spec).expanduser()
    if local.is_dir() or local.is_file():
        folder = local if local.is_dir() else local.parent
        tokenizer_file = local if local.is_file() else local / "tokenizer.json"
        if not tokenizer_file.exists():
            raise ConfigError("data.tokenizer", f"{spec!r} has no tokenizer.json (a fast tokenizer is needed).")
        config_file = folder / "tokenizer_config.json"
        return tokenizer_file, json.loads(config_file.read_text()) if config_file.exists() else {}
    from huggingface_hub import hf_hub_download

    try:
        tokenizer_file = Path(hf_hub_download(spec, "tokenizer.json"))
    except Exception as err:  # noqa: BLE001 - offline, unknown id, gated: all one message
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(
            "data.tokenizer",
            f"cannot load tokenizer {spec!r} from the Hugging Face Hub "
            f"({type(err).__name__}: {first}); offline, download it once where the Hub is "
            "reachable (it is cached) or name a local folder with tokenizer.json.",
        ) from None
    try:
        config = json.loads(Path(hf_hub_download(spec, "tokenizer_config.json")).read_text())
    except Exception:  # noqa: BLE001 - optional: EOS then comes from the usual token names
        config = {}
    return tokenizer_file, config


EOS_NAMES = ("</s>", "<|endoftext|>", "<eos>", "<|end_of_text|>")


def _eos_id(backend, config: dict) -> int | None:
    eos = config.get("eos_token")
    if isinstance(eos, dict):  # AddedToken serialized as a mapping
        eos = eos.get("content")
    for name in ([eos] if isinstance(eos, str) else []) + list(EOS_NAMES):
        token_id = backend.token_to_id(name)
        if token_id is not None:
            return token_id
    return None


def tokenizer_vocab_size(cfg) -> int | None:
    """The vocabulary size of a text config's tokenizer (None for GP; MQAR's own).

    Known without loading for `byte`, `bpe:<n>` and MQAR; a Hugging Face tokenizer is
    loaded (from its cache, or downloaded once). `cfg` is a `DataConfig`.
    """
    if cfg.task == "gp":
        return None
    static = cfg.static_vocab_size()
    if static is not None or cfg.task != "text":
        return static
    return _pretrained(cfg.tokenizer).vocab_size
