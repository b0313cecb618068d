import pytest
import torch
import transformers

from cem_ablate import build_model
from cem_ablate.config import ConfigError
from cem_ablate.interop import from_hf_llama, to_hf_llama


def random_hf_llama(**overrides):
    torch.manual_seed(0)
    cfg = dict(
        hidden_size=48,
        intermediate_size=100,
        num_hidden_layers=3,
        num_attention_heads=6,
        vocab_size=97,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
        tie_word_embeddings=False,
    )
    cfg.update(overrides)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)  # non-trivial norm gains
            else:
                p.normal_(0, 0.05)
    return model


def test_from_hf_llama_reproduces_logits():
    hf = random_hf_llama()
    ours = from_hf_llama(hf)
    ids = torch.randint(0, 97, (2, 33))
    with torch.no_grad():
        assert torch.allclose(ours(ids), hf(ids).logits, atol=1e-5)


def test_to_hf_llama_round_trip():
    torch.manual_seed(1)
    ours = build_model({"d_model": 32, "n_layers": 2, "n_heads": 4, "d_mlp": 80, "vocab_size": 60})
    hf = to_hf_llama(ours)
    ids = torch.randint(0, 60, (3, 17))
    with torch.no_grad():
        assert torch.allclose(ours(ids), hf(ids).logits, atol=1e-5)
        back = from_hf_llama(hf)
        assert torch.equal(back(ids), ours(ids))


def test_incompatible_models_are_refused_by_name():
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        from_hf_llama(random_hf_llama(num_key_value_heads=2))
    cem = build_model({"d_model": 32, "n_layers": 1, "n_heads": 4, "d_mlp": 80, "attention": "cem"})
    with pytest.raises(ConfigError, match="Llama baseline"):
        to_hf_llama(cem)
