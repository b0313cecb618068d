"""Move Llama baselines in and out of the Hugging Face format (docs/design/layers.md#s1-llama-baseline, docs/design/contract.md#s10-public-contract).

The Llama baseline is the same function as `transformers.LlamaForCausalLM` with
attention_bias=False, mlp_bias=False, tie_word_embeddings=False and no grouped-query
attention, so weights map one to one:

    model.embed_tokens            <-> model.embed_tokens
    layers.i.input_layernorm      <-> blocks.i.attention.norm
    layers.i.self_attn.{q,k,v,o}_proj <-> blocks.i.attention.{q,k,v,o}_proj
    layers.i.post_attention_layernorm <-> blocks.i.mlp.norm
    layers.i.mlp.{gate,up,down}_proj  <-> blocks.i.mlp.{gate,up,down}_proj
    model.norm, lm_head           <-> norm, lm_head

`transformers` is imported lazily: it is a test/interop extra, not a core dependency.
"""

from __future__ import annotations

from typing import Any

from cem_ablate.config.errors import ConfigError
from cem_ablate.model.assembly import build_model
from cem_ablate.model.config import parse_model_config
from cem_ablate.model.transformer import CEMTransformer


def _rope_theta(hf_config) -> float:
    params = getattr(hf_config, "rope_parameters", None) or {}
    if isinstance(params, dict) and "rope_theta" in params:
        if params.get("rope_type", "default") != "default":
            raise ConfigError(
                "rope_parameters.rope_type", f"only 'default' RoPE is supported, got {params['rope_type']!r}."
            )
        return float(params["rope_theta"])
    return float(getattr(hf_config, "rope_theta", 10000.0))


def _check_compatible(c) -> None:
    checks = {
        "num_key_value_heads": (
            getattr(c, "num_key_value_heads", c.num_attention_heads) == c.num_attention_heads,
            "grouped-query attention is not supported: num_key_value_heads must equal num_attention_heads",
        ),
        "attention_bias": (not getattr(c, "attention_bias", False), "must be false"),
        "mlp_bias": (not getattr(c, "mlp_bias", False), "must be false"),
        "tie_word_embeddings": (
            not getattr(c, "tie_word_embeddings", False),
            "must be false (the baseline has an untied head)",
        ),
        "hidden_act": (getattr(c, "hidden_act", "silu") == "silu", "must be 'silu' (SwiGLU)"),
        "head_dim": (
            getattr(c, "head_dim", None) in (None, c.hidden_size // c.num_attention_heads),
            "must equal hidden_size / num_attention_heads",
        ),
    }
    for key, (ok, message) in checks.items():
        if not ok:
            raise ConfigError(f"hf_config.{key}", message + ".")


def model_config_from_hf(hf_config) -> dict[str, Any]:
    _check_compatible(hf_config)
    return {
        "d_model": hf_config.hidden_size,
        "n_layers": hf_config.num_hidden_layers,
        "n_heads": hf_config.num_attention_heads,
        "d_mlp": hf_config.intermediate_size,
        "vocab_size": hf_config.vocab_size,
        "max_seq_len": hf_config.max_position_embeddings,
        "norm_eps": hf_config.rms_norm_eps,
        "init_std": getattr(hf_config, "initializer_range", 0.02),
        "attention": {"name": "llama", "rope_theta": _rope_theta(hf_config)},
        "mlp": {"name": "llama"},
    }


def _name_map(n_layers: int) -> dict[str, str]:
    """Our parameter name -> Hugging Face parameter name."""
    names = {
        "embed_tokens.weight": "model.embed_tokens.weight",
        "norm.weight": "model.norm.weight",
        "lm_head.weight": "lm_head.weight",
    }
    for i in range(n_layers):
        ours, theirs = f"blocks.{i}", f"model.layers.{i}"
        names[f"{ours}.attention.norm.weight"] = f"{theirs}.input_layernorm.weight"
        names[f"{ours}.mlp.norm.weight"] = f"{theirs}.post_attention_layernorm.weight"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names[f"{ours}.attention.{proj}.weight"] = f"{theirs}.self_attn.{proj}.weight"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names[f"{ours}.mlp.{proj}.weight"] = f"{theirs}.mlp.{proj}.weight"
    return names


def from_hf_llama(hf_model) -> CEMTransformer:
    """A Llama baseline with the weights of a `transformers.LlamaForCausalLM`."""
    model = build_model(parse_model_config(model_config_from_hf(hf_model.config)))
    theirs = hf_model.state_dict()
    state = {ours: theirs[hf] for ours, hf in _name_map(model.dims.n_layers).items()}
    model.load_state_dict(state, strict=True)
    return model.to(next(hf_model.parameters()).dtype)


def to_hf_llama(model: CEMTransformer):
    """The same weights as a `transformers.LlamaForCausalLM` (Llama baselines only)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = model.config
    if cfg is None or cfg.attention.name != "llama" or cfg.mlp.name != "llama":
        raise ConfigError("model", "only a Llama baseline (attention: llama, mlp: llama) converts to LlamaForCausalLM.")
    if cfg.attention.repeats != 1 or cfg.mlp.repeats != 1:
        raise ConfigError("model", "a model with plain layer reuse has no LlamaForCausalLM equivalent.")
    if (
        cfg.stream != "residual" or cfg.block != "sequential"
    ):  # docs/design/energy-lens.md#s11-2-velocity-stream to docs/design/energy-lens.md#s11-3-energy-transformer-block: not a Llama function
        key = "stream" if cfg.stream != "residual" else "block"
        raise ConfigError(
            f"model.{key}",
            f"{key}: {getattr(cfg, key)} has no LlamaForCausalLM equivalent "
            "(only stream: residual, block: sequential converts).",
        )
    d = model.dims
    hf_config = LlamaConfig(
        hidden_size=d.d_model,
        intermediate_size=d.d_mlp,
        num_hidden_layers=d.n_layers,
        num_attention_heads=d.n_heads,
        num_key_value_heads=d.n_heads,
        vocab_size=d.vocab_size,
        max_position_embeddings=d.max_seq_len,
        rms_norm_eps=d.norm_eps,
        initializer_range=d.init_std,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.attention.options.rope_theta},
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
    )
    hf_model = LlamaForCausalLM(hf_config)
    ours = model.state_dict()
    state = {hf: ours[name] for name, hf in _name_map(d.n_layers).items()}
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    missing = [k for k in missing if "rotary_emb" not in k]
    if missing or unexpected:
        raise RuntimeError(f"weight mapping incomplete: missing {missing}, unexpected {unexpected}")
    dtype = next(model.parameters()).dtype
    # transformers wraps `to` with functools.wraps(nn.Module.to): its stub takes the model as the first argument
    return hf_model.to(dtype).eval()  # type: ignore[arg-type]
