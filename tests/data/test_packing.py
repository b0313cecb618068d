"""Packing into blocks, the on-disk token cache, and trained BPE tokenizers."""

import numpy as np
import pytest

from cem_ablate.config import parse
from cem_ablate.data.config import DataConfig
from cem_ablate.data.packing import PackedBlocks, build_token_cache
from cem_ablate.data.sources import TextSource
from cem_ablate.data.text_datamodule import TextDataModule
from cem_ablate.data.tokenizer import ByteTokenizer, load_tokenizer


class CountingTokenizer(ByteTokenizer):
    fingerprint = "byte-counting"

    def __init__(self):
        self.calls = 0

    def encode_batch(self, texts):
        self.calls += 1
        return super().encode_batch(texts)


def small_source(texts_by_split):
    return TextSource({s: [{"text": t} for t in texts] for s, texts in texts_by_split.items()}, "fp-small", "small")


def test_documents_are_joined_with_eos_and_cut_into_shifted_blocks(tmp_path):
    docs = ["abc", "de", "fghij"]
    source = small_source({"train": docs, "validation": ["v"], "test": ["t"]})
    cache, built = build_token_cache(source, ByteTokenizer(), tmp_path)
    assert built
    stream = np.asarray(cache.tokens("train"))
    expected = [*b"abc", 256, *b"de", 256, *b"fghij", 256]
    assert stream.tolist() == expected and stream.dtype == np.uint16
    blocks = PackedBlocks(stream, block_size=4)
    assert len(blocks) == (len(expected) - 1) // 4
    x, y = blocks[1]
    assert x.tolist() == expected[4:8] and y.tolist() == expected[5:9]


def test_token_cache_is_built_once_and_reused(tmp_path):
    source = small_source({"train": ["hello world"] * 50, "validation": ["val"], "test": ["test"]})
    first, second = CountingTokenizer(), CountingTokenizer()
    cache, built = build_token_cache(source, first, tmp_path)
    again, built_again = build_token_cache(source, second, tmp_path)
    assert built and not built_again
    assert first.calls > 0 and second.calls == 0  # the second load did not tokenize
    assert again.folder == cache.folder and again.meta == cache.meta


def test_text_data_module_reuses_the_stdlib_cache():
    cfg = parse(DataConfig, {"block_size": 32}, "data")
    options = dict(batch_size=4, seed=0, total_micro_batches=10)
    first = TextDataModule(cfg, **options)
    first.prepare()
    second = TextDataModule(parse(DataConfig, {"block_size": 64}, "data"), **options)
    second.prepare()  # another block size reads the same flat stream
    assert not second.built_cache and second.cache.folder == first.cache.folder
    assert second.source is None  # a cached corpus is not even loaded
    facts = second.describe()
    assert facts["tokens_train"] > 1_000_000 and facts["vocab_size"] == 257
    x, y = next(iter(second.train_dataloader()))
    assert x.shape == (4, 64) and (x[:, 1:] == y[:, :-1]).all()


def test_bpe_is_trained_on_train_split_once(tmp_path):
    texts = [f"def function_{i}(x):\n    return x * {i}\n" for i in range(300)]
    calls = []

    def train_texts():
        calls.append(1)
        return iter(texts)

    tok = load_tokenizer("bpe:320", tmp_path, "fp-code", train_texts)
    again = load_tokenizer("bpe:320", tmp_path, "fp-code", train_texts)
    assert len(calls) == 1 and again.fingerprint == tok.fingerprint
    (ids,) = tok.encode_batch(["def function_7(x):"])
    assert len(ids) < len("def function_7(x):") and ids.max() < 320
    assert tok.decode(ids.tolist()) == "def function_7(x):"


def test_bpe_vocab_size_must_be_sane():
    from cem_ablate.config import ConfigError

    with pytest.raises(ConfigError, match="at least 300"):
        parse(DataConfig, {"tokenizer": "bpe:100"}, "data")
