"""`cem-ablate export`: a trained run as a Hugging Face model directory.

    DIR/config.json                 model_type cem_ablate, auto_map, the platform's `model:` mapping
    DIR/modeling_cem_ablate.py      CEMAblateForCausalLM (hf_code/), on the copied platform code
    DIR/configuration_cem_ablate.py CEMAblateConfig
    DIR/cem_ablate_bundle.py, DIR/<package>__<module>.py   the platform source (source_bundle.py)
    DIR/model.safetensors           the platform state dict under `model.`
    DIR/tokenizer.json, tokenizer_config.json, ...   the run's tokenizer (PreTrainedTokenizerFast)
    DIR/cem_ablate_export.json      where it came from: run folder, checkpoint, trial key, platform version

`AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)` loads it with torch
and transformers alone. A Llama baseline (`interop.to_hf_llama` accepts it) exports as a
plain `LlamaForCausalLM` instead: no remote code. Everything is written into a temporary
folder beside DIR and renamed to DIR at the end, so DIR is never half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from cem_ablate import __version__
from cem_ablate.config import ConfigError
from cem_ablate.config.fingerprint import distribution_modules
from cem_ablate.export.source_bundle import Bundle, build_bundle
from cem_ablate.model.transformer import CEMTransformer
from cem_ablate.training.config import component_sources
from cem_ablate.training.trained_run import TrainedRun

HF_CODE = Path(__file__).parent / "hf_code"
MODEL_TYPE = "cem_ablate"
AUTO_MAP = {
    "AutoConfig": "configuration_cem_ablate.CEMAblateConfig",
    "AutoModelForCausalLM": "modeling_cem_ablate.CEMAblateForCausalLM",
}
PROVENANCE_FILE = "cem_ablate_export.json"


def is_llama_baseline(model: CEMTransformer) -> bool:
    cfg = model.config
    return (
        cfg.attention.name == "llama"
        and cfg.mlp.name == "llama"
        and cfg.attention.repeats == 1
        and cfg.mlp.repeats == 1
        and cfg.stream == "residual"
        and cfg.block == "sequential"
    )


def decoding_warning(model: CEMTransformer) -> str | None:
    """The `warning:` line for a model whose components lack the decoding hook (the
    exported model then recomputes the prefix for every generated token), or None."""
    from cem_ablate.model.decoding import missing_hooks

    missing = [] if is_llama_baseline(model) else missing_hooks(model)
    if not missing:
        return None
    return (
        f"warning: {'; '.join(missing)} (model/protocol.py IncrementalDecoding): the exported model's "
        "generate(use_cache=True) recomputes the whole prefix for every new token."
    )


def check_target(out: Path) -> None:
    """DIR must not hold anything yet (checked before any work)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError("--to", f"{out} already exists and is not empty; name a new folder.")


def export_run(run: TrainedRun, out: str | Path) -> Path:
    out = Path(out)
    check_target(out)
    model = run.model
    assert isinstance(model, CEMTransformer)  # load_trained_run builds one (TrainedRun types it nn.Module)
    bundle = model_bundle(model)  # whole or one ConfigError, before anything is written
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_model(model, tmp, bundle)
        if run.tokenizer is not None:
            write_tokenizer(run.tokenizer, tmp, model.dims.max_seq_len)
        provenance = {
            "platform_version": __version__,
            "run_dir": str(run.folder.path.resolve()),
            "checkpoint": str(run.checkpoint.resolve()),
            "run_name": run.config.name,
            "trial_key": run.config.trial_key(),
            "trained_by_this_code": run.same_code,
            "format": "LlamaForCausalLM" if is_llama_baseline(model) else "cem_ablate",
        }
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
        if out.is_dir():
            out.rmdir()  # empty (check_target)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def model_bundle(model: CEMTransformer) -> Bundle | None:
    """The source an export of `model` copies (None: a Llama baseline needs none); a
    ConfigError names what cannot be copied."""
    if is_llama_baseline(model):
        return None
    sources = component_sources(model.config)
    siblings = {m for s in sources if s.distribution for m in distribution_modules(s.distribution.partition("==")[0])}
    return build_bundle((s.module for s in sources), siblings)


def write_model(model: CEMTransformer, folder: Path, bundle: Bundle | None = None) -> None:
    """The model's Hugging Face files (config, code, weights) into `folder`."""
    if is_llama_baseline(model):
        from cem_ablate.interop import to_hf_llama

        to_hf_llama(model.float()).save_pretrained(folder)
        return
    bundle = bundle or model_bundle(model)
    assert bundle is not None  # model_bundle gives None only for a Llama baseline (returned above)
    for name, text in bundle.files.items():
        (folder / name).write_text(text)
    code = {file.name: file.read_text() for file in sorted(HF_CODE.glob("*.py"))}
    digest = hashlib.sha256("".join(f"{n}\0{t}\0" for n, t in sorted({**bundle.files, **code}.items())).encode())
    for name, text in code.items():
        # Hugging Face keys its cache of remote code (and the model class it registers for
        # a config class) by these files' content: without the digest every export would
        # share one config class, and a second export loaded in a process would get the
        # first one's model class and source.
        (folder / name).write_text(text + f'\nEXPORT_SOURCE_DIGEST = "{digest.hexdigest()[:16]}"\n')
    dims = model.dims
    config = {
        "model_type": MODEL_TYPE,
        "architectures": ["CEMAblateForCausalLM"],
        "auto_map": AUTO_MAP,
        "cem_model": model.config.to_mapping(),
        "vocab_size": dims.vocab_size,
        "hidden_size": dims.d_model,
        "num_hidden_layers": dims.n_layers,
        "num_attention_heads": dims.n_heads,
        "max_position_embeddings": dims.max_seq_len,
        "tie_word_embeddings": False,
        "use_cache": True,
        "dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    from safetensors.torch import save_file

    state = {f"model.{k}": v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def write_tokenizer(tokenizer, folder: Path, max_length: int) -> None:
    """The run's tokenizer as a `PreTrainedTokenizerFast` (`AutoTokenizer` loads it; with
    `trust_remote_code=True` beside a cem_ablate model, whose config is remote code), and
    its EOS id into config.json so `generate` stops there."""
    from transformers import PreTrainedTokenizerFast

    from cem_ablate.export.tokenizer_files import backend_of

    backend, eos_token = backend_of(tokenizer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=eos_token,
        bos_token=eos_token,
        unk_token=None,
        pad_token=eos_token,
        model_max_length=max_length,
    )
    fast.save_pretrained(folder)
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text())
    config.update(eos_token_id=tokenizer.eos_id, bos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.eos_id)
    config_file.write_text(json.dumps(config, indent=2) + "\n")
