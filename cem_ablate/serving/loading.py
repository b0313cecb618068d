"""A trained model and its tokenizer from a run folder or one of its checkpoints.

    RUN_DIR                      <run>/config.yaml + <run>/checkpoints/last.ckpt
    RUN_DIR/checkpoints/X.ckpt   that checkpoint, with the config of its run folder

The model is rebuilt from the run's config with this code's components and given the
checkpoint's weights. A run whose recorded trial key differs from the one this code
computes for its config was trained under other code (training/run_directory.py,
config/fingerprint.py): that is one warning (`TrainedModel.warnings`) when its weights
still fit, and one ConfigError when they do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from torch import nn

from cem_ablate.config import ConfigError
from cem_ablate.data.config import BPE_SPEC
from cem_ablate.data.sources import open_text_source, source_fingerprint
from cem_ablate.data.tokenizer import TextTokenizer, load_tokenizer
from cem_ablate.model import build_model
from cem_ablate.training.config import RunConfig, parse_run_config
from cem_ablate.training.run_directory import locate_trained

MODEL_PREFIX = "model."  # the LightningModule holds the network as `model`


@dataclass
class TrainedModel:
    model: nn.Module  # eval mode, on the CPU, in the checkpoint's precision (float32)
    tokenizer: TextTokenizer
    config: RunConfig
    checkpoint: Path
    warnings: list[str] = field(default_factory=list)  # one line each, for the CLI to print


def run_tokenizer(cfg: RunConfig) -> TextTokenizer:
    """The tokenizer the run trained with (a trained BPE is read from the cache, or
    trained again from the same corpus if the cache was cleared)."""
    data = cfg.data
    if data.task != "text":
        raise ConfigError("data.task", f"{data.task!r} runs have no text tokenizer; generate needs a text run.")
    # only a BPE trained here is keyed by its corpus (reading the stdlib's file list costs seconds)
    corpus = source_fingerprint(data) if BPE_SPEC.match(data.tokenizer) else ""
    return load_tokenizer(data.tokenizer, data.cache_root, corpus,
                          lambda: (row["text"] for row in open_text_source(data).splits["train"]))


def load_trained(target: str | Path) -> TrainedModel:
    folder, checkpoint, unverified = locate_trained(target)
    cfg = parse_run_config(yaml.safe_load(folder.config_file.read_text()))
    other_code = ""
    if folder.holds(cfg) is False:
        recorded = folder.trial_key_file.read_text().strip()
        other_code = (f"{folder.path} was trained under other code (trial key {recorded}, this code's "
                      f"{cfg.trial_key()}: a platform module or one of its components changed)")
    tokenizer = run_tokenizer(cfg)
    model = build_model(cfg.training_model(tokenizer.vocab_size))
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    weights = {k[len(MODEL_PREFIX):]: v for k, v in state.items() if k.startswith(MODEL_PREFIX)}
    missing, unexpected = _mismatch(model, weights)
    if missing or unexpected:
        cause = f"; {other_code}" if other_code else " (a checkpoint from another code version?)"
        raise ConfigError(str(checkpoint), f"its weights do not fit this code's model{cause}: missing "
                          f"{missing or 'none'}, unexpected {unexpected or 'none'}.")
    model.load_state_dict(weights)
    warnings = [unverified] if unverified else []
    if other_code:
        warnings.append(f"{other_code}; its weights fit this code's model and are loaded into it")
    return TrainedModel(model.eval(), tokenizer, cfg, checkpoint, warnings)


def _mismatch(model: nn.Module, weights: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    own = model.state_dict()
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    wrong = sorted(k for k in set(own) & set(weights) if own[k].shape != weights[k].shape)
    return missing[:3] + [f"{k} (shape)" for k in wrong[:3]], unexpected[:3]
