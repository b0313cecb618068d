"""components.attention_blocks: the public building blocks of an attention component."""

import pytest
import torch

from cem_ablate import registry
from components.attention_blocks import LlamaAttention, RotaryEmbedding, causal_mask, extend_kv_cache


def test_causal_mask_is_the_lower_triangle_and_its_last_rows_in_decode():
    full = causal_mask(5, 5)
    assert torch.equal(full, torch.ones(5, 5, dtype=torch.bool).tril())
    assert torch.equal(causal_mask(2, 5), full[3:])  # two new tokens after three cached ones
    assert torch.equal(causal_mask(1, 5), torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="queries <= keys"):
        causal_mask(3, 2)


def test_extend_kv_cache_appends_along_the_sequence():
    k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 3, 8)
    assert extend_kv_cache(None, k, v) == (k, v)
    keys, values = extend_kv_cache((k, v), k[:, :, :1], v[:, :, :1])
    assert type(keys) is torch.Tensor and keys.shape == (2, 4, 4, 8)
    assert torch.equal(keys[:, :, 3], k[:, :, 0]) and torch.equal(values[:, :, :3], v)


def test_the_blocks_are_the_zoo_s_own():
    assert registry.get("attention", "llama").factory is LlamaAttention
    cos, sin = RotaryEmbedding(8)(4, torch.float64, "cpu")
    assert cos.shape == sin.shape == (4, 8) and torch.equal(cos[0], torch.ones(8, dtype=torch.float64))
