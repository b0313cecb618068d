"""A cem-ablate model as a Hugging Face causal LM (written by `cem-ablate export`).

The network is the platform's own `CEMTransformer`, built by the platform code copied
beside this file (`cem_ablate_bundle`, see cem_ablate/export/source_bundle.py), so its
logits are the platform's; weights are the platform's state dict under `model.`.
Depends only on torch, transformers and the copied files.

Decoding: the model keeps Hugging Face's `Cache` API. The `DynamicCache` holds the
prefix's token ids (layer 0, as a (B, 1, S, 1) integer tensor), so everything Hugging
Face does to a cache (beam reordering, cropping, expanding) stays exact; beside it, as
an attribute, rides the platform's own decoding state (`cem_ablate.model.decoding`:
Llama attention its keys and values, CEM attention one tensor per application), so a
generation step costs the new token only. Before each step the state is checked
against the token ids: rows reordered by beam search are matched row by row (equal
prefixes have equal states), anything else (a cropped or foreign cache) is rebuilt by
one prefill. With gradients enabled (training through this class) the whole sequence
is recomputed instead. Either way the logits are the full forward's. A model whose
components lack the decoding hook (`cem_ablate.model.protocol.IncrementalDecoding`)
recomputes the whole prefix for every token; its first cached call says so, once, on
transformers' logger.

Padding: the platform model has no padding mask (RoPE/ALiBi positions count from the
first token), so only right padding is exact (causal: later pads never reach earlier
positions); a left-padded mask raises.
"""

import sys

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.utils import logging

# Hugging Face names the package after the folder and re-executes this file when any file
# of the folder changed (another export loaded from a folder of the same name in this
# process), but not the modules it imports: drop those, so the platform source that runs
# is the one copied beside this file.
_PACKAGE = __name__.rpartition(".")[0]
if _PACKAGE:
    for _name in [
        n
        for n in sys.modules
        if n.startswith(_PACKAGE + ".")
        and n.rpartition(".")[2] not in ("modeling_cem_ablate", "configuration_cem_ablate")
    ]:
        del sys.modules[_name]

from .cem_ablate_bundle import build_model, decode, missing_hooks, new_cache, parse_model_config  # noqa: E402
from .configuration_cem_ablate import CEMAblateConfig  # noqa: E402

logger = logging.get_logger(__name__)


# transformers 5.x renamed the output's `past_key_values` to `cache`.
_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def _check_right_padded(attention_mask):
    if attention_mask is None or attention_mask.dim() != 2:
        return
    mask = attention_mask.to(torch.int64)
    if bool((mask[:, 1:] > mask[:, :-1]).any()):
        raise ValueError(
            "cem-ablate models support right padding only (no padding mask: positions start at "
            "the first token); decode left-padded batches one sequence at a time."
        )


def _decoding_state(model, cache, prefix):
    """The platform decoding state for a cache whose token ids are `prefix` (B, S) or None."""
    held = getattr(cache, "_cem_decoding", None)
    if prefix is None:
        return new_cache(model)
    if held is not None:
        state, seen = held
        if seen.shape == prefix.shape and torch.equal(seen, prefix.to(seen.device)):
            return state
        if seen.shape[1] == prefix.shape[1]:  # beam search reordered (or repeated) the rows
            match = (prefix.to(seen.device)[:, None, :] == seen[None, :, :]).all(-1)  # (new rows, old rows)
            if bool(match.any(1).all()):
                state.select(match.to(torch.int64).argmax(1))
                return state
    state = new_cache(model)
    decode(model, prefix, state)
    return state


class CEMAblateForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = CEMAblateConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules = []

    def __init__(self, config: CEMAblateConfig):
        super().__init__(config)
        # from_pretrained builds on the meta device and refills non-persistent buffers
        # (RoPE's inv_freq) with empty tensors, then calls _init_weights: so the model is
        # built on the CPU here and each module keeps its computed buffers to restore.
        with torch.device("cpu"):
            self.model = build_model(parse_model_config(config.cem_model))
        for module in self.model.modules():
            module._cem_buffers = {
                name: buffer.detach().clone()
                for name, buffer in module.named_buffers(recurse=False)
                if name in module._non_persistent_buffers_set
            }
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The platform initializes its parameters when it builds them (docs/design/layers.md#s1-llama-baseline); a loaded
        # model's parameters all come from model.safetensors. Only computed buffers return.
        for name, value in getattr(module, "_cem_buffers", {}).items():
            buffer = getattr(module, name)
            if buffer.device.type != "meta":
                buffer.copy_(value.to(buffer.device, buffer.dtype))

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Module:
        return self.model.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.model.lm_head = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        cache=None,
        past_key_values=None,
        use_cache=None,
        labels=None,
        logits_to_keep=0,
        return_dict=None,
        **kwargs,
    ):
        if input_ids is None:
            raise ValueError("cem-ablate models take input_ids (no inputs_embeds).")
        cache = cache if cache is not None else past_key_values
        use_cache = self.config.use_cache if use_cache is None else use_cache
        _check_right_padded(attention_mask)
        batch, new = input_ids.shape
        ids, prefix = input_ids, None
        if use_cache:
            if cache is None:
                cache = DynamicCache()
            if not isinstance(cache, Cache):
                raise TypeError(f"expected a transformers Cache, got {type(cache).__name__}")
            if cache.get_seq_length() > 0:
                prefix = cache.layers[0].keys.reshape(batch, -1).to(input_ids.device)
                ids = torch.cat([prefix, input_ids], dim=1)
            tokens = input_ids.reshape(batch, 1, new, 1)
            cache.update(tokens, tokens, 0)
        if use_cache and not torch.is_grad_enabled():
            state = _decoding_state(self.model, cache, prefix)
            if state.recompute and not getattr(self, "_cem_warned_recompute", False):
                self._cem_warned_recompute = True
                # The copied registry calls every copied component "built-in": leave that label out.
                missing = "; ".join(line.replace(" (built-in)", "") for line in missing_hooks(self.model))
                logger.warning(
                    f"{missing}: generate(use_cache=True) recomputes the whole prefix for every new "
                    "token (no incremental decoding)."
                )
            logits = decode(self.model, input_ids, state)
            cache._cem_decoding = (state, ids)
        else:
            logits = self.model(ids)[:, -new:]
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache if use_cache else None})
