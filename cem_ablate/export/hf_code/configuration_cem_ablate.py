"""The Hugging Face config of a cem-ablate model (written by `cem-ablate export`).

`cem_model` is the platform's own `model:` mapping (docs/design/contract.md#s10-public-contract), validated and built by
the copied platform code (`cem_ablate_bundle.build_model`); the other fields are the
standard names tools read (lm-evaluation-harness reads `max_position_embeddings`).
Depends only on transformers.
"""

from transformers import PretrainedConfig


class CEMAblateConfig(PretrainedConfig):
    model_type = "cem_ablate"

    def __init__(
        self,
        cem_model=None,
        vocab_size=32000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=2048,
        use_cache=True,
        **kwargs,
    ):
        self.cem_model = dict(cem_model or {})
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.use_cache = use_cache
        kwargs.setdefault(
            "tie_word_embeddings", False
        )  # the platform's head is untied (docs/design/layers.md#s1-llama-baseline)
        super().__init__(**kwargs)
