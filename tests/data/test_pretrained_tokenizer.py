"""Hugging Face tokenizers load through `tokenizers` alone (no `transformers`), from a
local folder or the Hub; offline, a Hub id fails with one ConfigError naming the key."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cem_ablate.config import ConfigError
from cem_ablate.data.tokenizer import load_tokenizer


def _save_tokenizer(folder, eos="</s>"):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<s>", eos],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["hello world, hello tokenizer"] * 20, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": eos}}))
    return tok


def test_local_folder_loads_with_eos_from_config(tmp_path):
    reference = _save_tokenizer(tmp_path / "tok", eos="<end>")
    tok = load_tokenizer(str(tmp_path / "tok"), tmp_path, "corpus", lambda: iter(()))
    assert tok.eos_id == reference.token_to_id("<end>") == 2
    assert tok.vocab_size == reference.get_vocab_size(with_added_tokens=True)
    ids = tok.encode_batch(["hello world"])[0]
    assert list(ids) == reference.encode("hello world", add_special_tokens=False).ids


def test_offline_hub_id_is_one_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # nothing cached
    with pytest.raises(ConfigError) as err:
        load_tokenizer("hf-internal-testing/llama-tokenizer", tmp_path, "corpus", lambda: iter(()))
    assert err.value.path == "data.tokenizer"
    assert "hf-internal-testing/llama-tokenizer" in str(err.value) and "offline" in str(err.value)


def test_loading_does_not_import_transformers(tmp_path):
    """A plain install (no `transformers`) loads a Hugging Face tokenizer."""
    _save_tokenizer(tmp_path / "tok")
    script = (
        "import sys; from cem_ablate.data.tokenizer import load_tokenizer; "
        f"load_tokenizer({str(tmp_path / 'tok')!r}, None, '', None); "
        "print('transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_tokenizer_is_read_once_per_process_until_its_file_changes(tmp_path, monkeypatch):
    import os

    from tokenizers import Tokenizer

    reads = []
    real = Tokenizer.from_file
    monkeypatch.setattr(Tokenizer, "from_file", staticmethod(lambda path: reads.append(path) or real(path)))
    _save_tokenizer(tmp_path / "tok")
    first = load_tokenizer(str(tmp_path / "tok"), tmp_path, "corpus", lambda: iter(()))
    again = load_tokenizer(str(tmp_path / "tok"), tmp_path, "corpus", lambda: iter(()))
    assert again is first and len(reads) == 1
    _save_tokenizer(tmp_path / "tok", eos="<end>")  # rewritten: read again
    stat = (tmp_path / "tok" / "tokenizer.json").stat()
    os.utime(tmp_path / "tok" / "tokenizer.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    changed = load_tokenizer(str(tmp_path / "tok"), tmp_path, "corpus", lambda: iter(()))
    assert len(reads) == 2 and changed.eos_id == 2 and changed is not first
