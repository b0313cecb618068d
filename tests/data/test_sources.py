"""Text sources: the offline stdlib corpus and local files, through HF datasets."""

import json
import socket

import pytest

from cem_ablate.config import ConfigError, parse
from cem_ablate.data.config import DataConfig
from cem_ablate.data.sources import SPLITS, open_text_source, split_of, stdlib_files, stdlib_fingerprint


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_split_is_a_deterministic_function_of_the_key():
    keys = [f"pkg/module_{i}.py" for i in range(2000)]
    first = [split_of(k, 0.05, 0.05) for k in keys]
    assert first == [split_of(k, 0.05, 0.05) for k in keys]
    share = {s: first.count(s) / len(keys) for s in SPLITS}
    assert 0.03 < share["validation"] < 0.07 and 0.03 < share["test"] < 0.07


def test_stdlib_corpus_loads_offline(no_network):
    source = open_text_source(parse(DataConfig, {}, "data"))
    files = stdlib_files()
    assert len(files) > 200 and not any(f.startswith(("site-packages/", "test/")) for f in files)
    assert set(source.splits) == set(SPLITS)
    sizes = {s: len(source.splits[s]) for s in SPLITS}
    assert sum(sizes.values()) == len(files) and min(sizes.values()) > 0
    assert "def " in source.splits["train"][0]["text"]  # whole files, not lines
    assert source.fingerprint.startswith(stdlib_fingerprint())


def test_local_jsonl_folder_is_split_by_document(tmp_path, no_network):
    rows = [{"text": f"document number {i} " * 5, "meta": i} for i in range(400)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:200]))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(r) for r in rows[200:]))
    source = open_text_source(parse(DataConfig, {"source": str(tmp_path)}, "data"))
    texts = {s: [row["text"] for row in source.splits[s]] for s in SPLITS}
    assert sum(len(t) for t in texts.values()) == 400
    assert not set(texts["train"]) & set(texts["test"])
    assert source.splits["train"].column_names == ["text"]


def test_local_source_streams(tmp_path, no_network):
    (tmp_path / "docs.jsonl").write_text("\n".join(json.dumps({"body": f"row {i}"}) for i in range(100)))
    cfg = parse(DataConfig, {"source": str(tmp_path / "docs.jsonl"), "text_field": "body", "streaming": True}, "data")
    source = open_text_source(cfg)
    assert source.streaming
    streamed = [row["text"] for s in SPLITS for row in source.splits[s]]
    assert sorted(streamed) == sorted(f"row {i}" for i in range(100))


def test_bad_sources_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="data.source"):
        parse(DataConfig, {"source": str(tmp_path / "missing.txt")}, "data")
    (tmp_path / "rows.jsonl").write_text(json.dumps({"body": "x"}))
    with pytest.raises(ConfigError, match="data.text_field"):
        open_text_source(parse(DataConfig, {"source": str(tmp_path / "rows.jsonl")}, "data"))
    with pytest.raises(ConfigError, match="data.tokenizer"):
        parse(DataConfig, {"tokenizer": "bpe:lots"}, "data")
