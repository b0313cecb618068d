"""A run's tokenizer as a `tokenizers.Tokenizer` that Hugging Face tools load.

`bpe:<n>` and Hugging Face tokenizers already are one. The `byte` tokenizer (UTF-8
bytes as ids 0..255, EOS 256; data/tokenizer.py) becomes a byte-level BPE with no
merges whose vocabulary maps each byte's GPT-2 unicode stand-in to the byte's value,
plus the EOS token at 256: it encodes every text to the same ids.
"""

from __future__ import annotations

from cem_ablate.data.tokenizer import EOS_TOKEN, ByteTokenizer


def byte_backend():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = bytes_to_unicode()
    tokenizer = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(EOS_TOKEN, special=True)])
    if tokenizer.token_to_id(EOS_TOKEN) != ByteTokenizer.eos_id:
        raise RuntimeError("the byte tokenizer's EOS did not land on id 256")
    return tokenizer


def backend_of(tokenizer) -> tuple[object, str]:
    """(tokenizers.Tokenizer, EOS token) of a platform tokenizer."""
    if isinstance(tokenizer, ByteTokenizer):
        return byte_backend(), EOS_TOKEN
    backend = tokenizer._backend  # HFTokenizer wraps exactly this object
    return backend, backend.id_to_token(tokenizer.eos_id)
