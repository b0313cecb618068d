"""A trained run read back from its folder: config, weights, tokenizer. The one loader
that export, eval and generate use.

    RUN_DIR                      <run>/config.yaml + <run>/checkpoints/last.ckpt
    RUN_DIR/checkpoints/X.ckpt   that checkpoint, with the config of its run folder

The config is the folder's `config.yaml` (training/run_directory.py), the model is what
that config builds with this code, in float32 on the CPU in eval mode, and the weights are
the checkpoint's `state_dict` under the Lightning module's `model.` prefix, read with
`weights_only=True` (tensors and plain containers only: a checkpoint file is never trusted
to run code). A run whose recorded trial key differs from the one this code computes for
its config was trained under other code (config/fingerprint.py): one warning when its
weights still fit, one ConfigError naming what does not fit when they do not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from cem_ablate.config import ConfigError, load_yaml
from cem_ablate.data.config import BPE_SPEC
from cem_ablate.data.tokenizer import TextTokenizer
from cem_ablate.training.config import RunConfig, parse_run_config
from cem_ablate.training.run_directory import RunDirectory, locate_trained

if TYPE_CHECKING:
    from cem_ablate.model.transformer import CEMTransformer

MODULE_PREFIX = "model."  # the LightningModule holds the network as `model`


@dataclass
class TrainedRun:
    folder: RunDirectory
    checkpoint: Path
    config: RunConfig
    model: nn.Module  # eval mode, float32, CPU
    tokenizer: TextTokenizer | None  # None: MQAR's synthetic vocabulary
    same_code: bool  # the stored trial key is the one this code computes
    warnings: list[str] = field(default_factory=list)  # one line each, as given to `warn`

    @property
    def vocab_size(self) -> int:
        return cast("CEMTransformer", self.model).dims.vocab_size  # a language model's network


def print_warning(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)


def load_trained_run(path: str | Path, *, warn: Callable[[str], None] | None = print_warning) -> TrainedRun:
    """The run at `path`; each warning line goes to `warn` (default: a `warning:` line on
    stderr; None: only into `TrainedRun.warnings`)."""
    folder, checkpoint, unverified = locate_trained(path)
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if warn is not None:
            warn(line)

    if unverified:
        say(unverified)
    try:
        cfg = parse_run_config(load_yaml(folder.config_file))
    except ConfigError as err:
        raise ConfigError(
            "RUN_DIR", f"{folder.config_file} does not parse with this code version ({err.path}: {err.message})"
        ) from None
    if cfg.data.task == "gp":
        raise ConfigError("RUN_DIR", f"{folder.path} is a GP regression run: it has no language model to load.")
    same_code = folder.holds(cfg) is not False
    other_code = (
        ""
        if same_code
        else (
            f"{folder.path} was trained under other code (trial key {folder.trial_key_file.read_text().strip()}, "
            f"this code's {cfg.trial_key()}: a platform module or one of its components changed)"
        )
    )
    tokenizer = run_tokenizer(cfg)
    vocab = tokenizer.vocab_size if tokenizer is not None else cfg.data.mqar.vocab_size
    from cem_ablate.model.assembly import build_model

    model = build_model(cfg.training_model(vocab))
    load_weights(model, checkpoint, other_code)
    if other_code:
        say(f"{other_code}; its weights fit this code's model and are loaded into it")
    return TrainedRun(folder, checkpoint, cfg, model.float().eval(), tokenizer, same_code, lines)


def load_weights(model: nn.Module, checkpoint: Path, other_code: str = "") -> None:
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is one message
        raise ConfigError("CHECKPOINT", f"cannot read {checkpoint}: {type(err).__name__}: {err}") from None
    weights = state.get("state_dict", state) if isinstance(state, dict) else None
    if not isinstance(weights, dict):
        raise ConfigError("CHECKPOINT", f"{checkpoint} holds no state_dict.")
    ours = {k[len(MODULE_PREFIX) :]: v for k, v in weights.items() if k.startswith(MODULE_PREFIX)}
    expected = model.state_dict()
    missing = sorted(set(expected) - set(ours))
    unexpected = sorted(set(ours) - set(expected))
    wrong = sorted(k for k in set(ours) & set(expected) if ours[k].shape != expected[k].shape)
    if missing or unexpected or wrong:
        parts = [
            f"{what} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
            for what, keys in (("missing", missing), ("unexpected", unexpected), ("shape of", wrong))
            if keys
        ]
        cause = f"; {other_code}" if other_code else "; load it with the version that trained it"
        raise ConfigError(
            "CHECKPOINT",
            f"{checkpoint} does not fit the model its config.yaml builds with this "
            f"code version ({'; '.join(parts)}){cause}.",
        )
    model.load_state_dict(ours, strict=True)


def run_tokenizer(cfg: RunConfig) -> TextTokenizer | None:
    """The text tokenizer the run trained with (None for MQAR). A `bpe:<n>` tokenizer is the
    one training saved under the data cache, keyed by its corpus (trained again from the same
    corpus only if it is gone); the others are keyed by name alone (reading a corpus's file
    list to key a byte tokenizer would cost seconds for nothing)."""
    if cfg.data.task != "text":
        return None
    from cem_ablate.data.sources import open_text_source, source_fingerprint
    from cem_ablate.data.tokenizer import load_tokenizer

    data = cfg.data
    corpus = source_fingerprint(data) if BPE_SPEC.match(data.tokenizer) else ""
    return load_tokenizer(
        data.tokenizer, data.cache_root, corpus, lambda: (row["text"] for row in open_text_source(data).splits["train"])
    )
