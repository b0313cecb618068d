"""A trained run read back from its folder: config, weights, tokenizer, MLflow run.

`cem-ablate export` and `cem-ablate eval` take RUN_DIR (the folder `train` or a study
wrote, `training/run_directory.py`) or CHECKPOINT (a `.ckpt` inside such a folder,
`<run_dir>/checkpoints/*.ckpt`): the config is the folder's `config.yaml`, the model is
what that config builds with this code, and the weights are the checkpoint's
`state_dict` under the Lightning module's `model.` prefix.

A run trained by another code version (its stored trial key is not the one this code
computes for its config: the code fingerprint or platform version changed) gets one
`warning:` line; if its weights do not fit the model this code builds, one `ConfigError`
names what does not fit.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from cem_ablate.config import ConfigError, load_yaml
from cem_ablate.model.transformer import CEMTransformer
from cem_ablate.training.config import RunConfig, parse_run_config
from cem_ablate.training.run_directory import RunDirectory, locate_trained

MODULE_PREFIX = "model."  # LanguageModelModule.model


@dataclass
class TrainedRun:
    folder: RunDirectory
    checkpoint: Path
    config: RunConfig
    model: CEMTransformer  # eval mode, float32, CPU
    tokenizer: object | None  # data.tokenizer.TextTokenizer (None: MQAR's synthetic vocabulary)
    same_code: bool  # the stored trial key is the one this code computes

    @property
    def vocab_size(self) -> int:
        return self.model.dims.vocab_size


def load_trained_run(path: str | Path, *, warn=None) -> TrainedRun:
    folder, checkpoint, unverified = locate_trained(path)
    warn = warn or (lambda line: print(line, file=sys.stderr))
    if unverified:
        warn(f"warning: {unverified}")
    try:
        cfg = parse_run_config(load_yaml(folder.config_file))
    except ConfigError as err:
        raise ConfigError("RUN_DIR", f"{folder.config_file} does not parse with this code version "
                          f"({err.path}: {err.message})") from None
    if cfg.data.task == "gp":
        raise ConfigError("RUN_DIR", f"{folder.path} is a GP regression run; only language models export.")
    same_code = folder.holds(cfg) is not False
    if not same_code:
        warn(f"warning: {folder.path} was trained by another code version (its trial key is not this code's "
             "for its config); the exported model runs this code's layers with its weights.")
    tokenizer = run_tokenizer(cfg)
    vocab = tokenizer.vocab_size if tokenizer is not None else cfg.data.mqar.vocab_size
    from cem_ablate.model.assembly import build_model

    model = build_model(cfg.training_model(vocab))
    load_weights(model, checkpoint)
    return TrainedRun(folder, checkpoint, cfg, model.float().eval(), tokenizer, same_code)


def load_weights(model: CEMTransformer, checkpoint: Path) -> None:
    try:
        # The run's own Lightning checkpoint (it pickles loop state): trusted like a resume.
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any unreadable file is one message
        raise ConfigError("CHECKPOINT", f"cannot read {checkpoint}: {type(err).__name__}: {err}") from None
    weights = state.get("state_dict", state) if isinstance(state, dict) else None
    if not isinstance(weights, dict):
        raise ConfigError("CHECKPOINT", f"{checkpoint} holds no state_dict.")
    ours = {k[len(MODULE_PREFIX):]: v for k, v in weights.items() if k.startswith(MODULE_PREFIX)}
    expected = model.state_dict()
    missing = sorted(set(expected) - set(ours))
    unexpected = sorted(set(ours) - set(expected))
    wrong = sorted(k for k in set(ours) & set(expected) if ours[k].shape != expected[k].shape)
    if missing or unexpected or wrong:
        parts = [f"{what} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
                 for what, keys in (("missing", missing), ("unexpected", unexpected), ("shape of", wrong)) if keys]
        raise ConfigError("CHECKPOINT", f"{checkpoint} does not fit the model its config.yaml builds with this "
                          f"code version ({'; '.join(parts)}); export it with the version that trained it.")
    model.load_state_dict(ours, strict=True)


def run_tokenizer(cfg: RunConfig):
    """The text tokenizer the run trained with (None for MQAR). A `bpe:<n>` tokenizer is
    the one training saved under the data cache (trained again only if it is gone)."""
    if cfg.data.task != "text":
        return None
    from cem_ablate.data.sources import open_text_source, source_fingerprint
    from cem_ablate.data.tokenizer import load_tokenizer

    data = cfg.data
    return load_tokenizer(data.tokenizer, data.cache_root, source_fingerprint(data),
                          lambda: (row["text"] for row in open_text_source(data).splits["train"]))
