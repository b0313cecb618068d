"""A run config: `model:` + `train:` + `data:` (+ `name`), validated once at the edge.

    name: tiny
    model: {size: tiny, attention: {name: cem}}
    train: {lr: 2e-3, batch_size: 16, max_steps: 300}
    data:  {source: stdlib, tokenizer: byte, block_size: 128}

The optimizer defaults are the paper's recipe (docs/design/experiments.md#s7-training-recipe, Table 2); the batch, budget
and evaluation defaults are CPU-sized.

Two facts have their single owner here:
- the vocabulary a run trains with (`RunConfig.training_model`): `model.vocab_size`
  when given, else the tokenizer's (known statically for `byte`, `bpe:<n>` and MQAR;
  loaded for a Hugging Face tokenizer), else 32,000 (the paper's Llama tokenizer).
  The model, its Llama baseline and hence the Chinchilla budget all use it, so a byte
  model trains on 20 x its own byte-vocabulary baseline while `size: 86M` with
  vocabulary 32,000 trains on 20 x 86,371,488 tokens.
- a run's identity: `variant_key()` (what defines the trained function: everything but
  lr, seed and execution settings) and `trial_key()` (the variant, lr, seed, the data's
  fingerprint, the platform version and the code fingerprint, config/fingerprint.py).
  Run folders, Optuna study names, MLflow tags and cross-study reuse all use these two.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cem_ablate import registry
from cem_ablate.config import ConfigError, parse, require, to_dict
from cem_ablate.config.errors import unknown
from cem_ablate.config.fingerprint import CodeFingerprint, ComponentSource, code_fingerprint
from cem_ablate.config.identity import digest
from cem_ablate.config.schema import join
from cem_ablate.data.config import DataConfig
from cem_ablate.model.config import ModelConfig, parse_model_config

DEFAULT_MAX_STEPS = 200  # when neither max_steps nor token_budget is given


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 1e-3  # peak learning rate
    batch_size: int = 8  # sequences per device per micro-batch
    effective_batch: int | None = None  # sequences per optimizer step; null: batch_size x devices x nodes
    eval_batch_size: int | None = None  # null: batch_size
    token_budget: int | str | None = (
        None  # tokens, e.g. 2e6, or "chinchilla" (docs/design/experiments.md#s7-training-recipe)
    )
    max_steps: int | None = None  # optimizer steps; exclusive with token_budget
    warmup_frac: float = (
        0.05  # linear warmup over this fraction of the steps (docs/design/experiments.md#s7-training-recipe)
    )
    final_lr_frac: float = 0.1  # the cosine decays to lr x this at the last step
    weight_decay: float = (
        0.1  # AdamW's, on matrices and embeddings only (docs/design/experiments.md#s7-training-recipe)
    )
    decay_preconditioner: bool = (
        False  # weight decay on preconditioner p, U, V too (docs/design/experiments.md#s7-training-recipe: not decayed)
    )
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW's (beta1, beta2)
    eps: float = 1e-9  # AdamW's epsilon
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    # AdamW's implementation (training/device_profile.py); auto = fused on CUDA, torch's default elsewhere
    optimizer_kernel: Literal["auto", "fused", "foreach", "single"] = "auto"
    seed: int = 0  # model init and data order; a study sets it per trial (seeds)
    devices: int = 1  # processes (GPUs or CPU processes) per node; > 1 trains with DDP
    num_nodes: int = 1  # machines of a multi-node DDP run
    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps"] = "auto"  # auto: a GPU when there is one, else the CPU
    # Lightning's precision; auto: bf16-mixed on GPUs that support it (the paper's recipe), else fp32
    precision: Literal["auto", "32-true", "bf16-mixed", "bf16-true", "16-mixed"] = "auto"
    compile: bool = False  # torch.compile each block, and the head + loss unit as one graph
    # torch.compile's backend: inductor generates kernels; aot_eager traces (dynamo + AOT
    # autograd) and runs eager kernels: what a compile failure is debugged with, and the CPU
    # rehearsal of the GPU's compile (tests/training/test_device_profile.py)
    compile_backend: Literal["inductor", "aot_eager", "eager"] = "inductor"
    # head + loss (training/head_loss.py): chunked never holds the full (tokens, vocab) logits;
    # auto = chunked on CUDA, plain elsewhere (CPU losses bit-identical to earlier versions)
    loss_impl: Literal["auto", "chunked", "plain"] = "auto"
    val_every_n_steps: int = 50  # optimizer steps between validations
    val_batches: int = 20  # per device, per validation
    test_batches: int | None = None  # per device; null: the whole test split
    ckpt_every_n_steps: int = 50  # optimizer steps between checkpoints (a killed run resumes from the last)
    log_every_n_steps: int = 10  # optimizer steps between logged training metrics
    threads: int | None = None  # torch intra-op threads per process; null: torch's default

    def validate(self, path: str) -> None:
        p = f"{path}." if path else ""
        require(self.lr > 0, f"{p}lr", f"must be positive, got {self.lr}.")
        for name in (
            "batch_size",
            "devices",
            "num_nodes",
            "val_every_n_steps",
            "val_batches",
            "ckpt_every_n_steps",
            "log_every_n_steps",
        ):
            value = getattr(self, name)
            require(value >= 1, f"{p}{name}", f"must be at least 1, got {value}.")
        for name in ("effective_batch", "eval_batch_size", "max_steps", "test_batches", "threads"):
            value = getattr(self, name)
            require(value is None or value >= 1, f"{p}{name}", f"must be at least 1 (or null), got {value}.")
        require(0 <= self.warmup_frac < 1, f"{p}warmup_frac", f"must be in [0, 1), got {self.warmup_frac}.")
        require(0 <= self.final_lr_frac <= 1, f"{p}final_lr_frac", f"must be in [0, 1], got {self.final_lr_frac}.")
        require(self.weight_decay >= 0, f"{p}weight_decay", "must be non-negative.")
        require(all(0 <= b < 1 for b in self.betas), f"{p}betas", f"must be in [0, 1), got {list(self.betas)}.")
        require(self.eps > 0, f"{p}eps", "must be positive.")
        require(self.grad_clip >= 0, f"{p}grad_clip", "must be non-negative (0 disables clipping).")
        # fused AdamW unscales fp16 gradients inside its kernel: nothing can clip them before it
        require(
            not (self.optimizer_kernel == "fused" and self.precision == "16-mixed" and self.grad_clip > 0),
            f"{p}optimizer_kernel",
            "fused AdamW unscales fp16 gradients inside its kernel, so they cannot "
            "be clipped before it; use optimizer_kernel foreach, precision bf16-mixed, or grad_clip 0.",
        )
        require(
            self.token_budget is None or self.max_steps is None,
            f"{p}token_budget",
            "set either token_budget or max_steps, not both.",
        )
        if isinstance(self.token_budget, str) and self.token_budget != "chinchilla":
            try:
                tokens = float(self.token_budget)
            except ValueError:
                raise ConfigError(
                    f"{p}token_budget", f"must be a number of tokens or 'chinchilla', got {self.token_budget!r}."
                ) from None
            require(
                tokens >= 1 and tokens.is_integer(),
                f"{p}token_budget",
                f"must be a positive whole number of tokens, got {self.token_budget!r}.",
            )
        if isinstance(self.token_budget, int):
            require(self.token_budget >= 1, f"{p}token_budget", "must be positive.")

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    name: str = "run"

    def training_model(self, tokenizer_vocab_size: int | None = None) -> ModelConfig:
        """The model config that trains, with its vocabulary resolved (the one owner).

        `tokenizer_vocab_size` is the loaded tokenizer's size; without it, the size
        known statically from the data config is used (a Hugging Face tokenizer not
        loaded yet counts as the default 32,000: dry runs only).
        """
        vocab = self.model.vocab_size or tokenizer_vocab_size or self.data.static_vocab_size()
        if vocab is None or vocab == self.model.vocab_size:
            return self.model
        return dataclasses.replace(self.model, vocab_size=vocab)

    # -- identity ---------------------------------------------------------------------

    def with_trial(self, lr: float, seed: int, name: str | None = None, threads: int | None = None) -> RunConfig:
        """This config at one learning rate and seed (a study's trial); `threads` only
        fills an unset `train.threads` (an execution setting: identity is unchanged)."""
        train = dataclasses.replace(
            self.train,
            lr=float(lr),
            seed=int(seed),
            threads=self.train.threads if self.train.threads is not None else threads,
        )
        return dataclasses.replace(self, train=train, name=self.name if name is None else name)

    def variant_mapping(self) -> dict[str, Any]:
        """What defines a variant: the resolved config without the run name, the
        per-trial keys (lr, seed) and the execution settings (they change how fast or
        how often things happen, never the numbers a run produces). The model is its
        `identity_mapping`: resolved dims, not a preset's name its overrides replaced."""
        out = self.to_mapping()
        out["model"] = self.model.identity_mapping()
        del out["name"]
        for key in TRIAL_KEYS + EXECUTION_KEYS:
            del out["train"][key]
        return out

    def variant_key(self) -> str:
        return digest(self.variant_mapping())

    def trial_key(self) -> str:
        """One training run's identity: two configs with the same trial key train the
        same function on the same data with the same code, so a finished result of
        one is a result of the other (trial reuse across studies). "The same code" is
        the code fingerprint (`code_fingerprint`) and the platform version; the
        variant key leaves code out, so a study's Optuna study names survive edits."""
        from cem_ablate import __version__
        from cem_ablate.data.sources import data_fingerprint

        return digest(
            {
                "variant": self.variant_key(),
                "lr": repr(float(self.train.lr)),
                "seed": self.train.seed,
                "data": data_fingerprint(self.data),
                "platform": __version__,
                "code": self.code_fingerprint().digest,
            }
        )

    def code_fingerprint(self) -> CodeFingerprint:
        """The platform's model/training/data/config source plus the modules of every
        component this config uses, built-in or plugin (config/fingerprint.py)."""
        return code_fingerprint(component_sources(self.model))

    def to_mapping(self) -> dict[str, Any]:
        """Plain nested dict that `parse_run_config` reads back to an equal config.

        The options of tasks the run does not use (`data.gp` for text, ...) are left
        out: they change nothing, so they must not change the config's hash either.
        """
        data = to_dict(self.data)
        for task in ("gp", "mqar"):
            if self.data.task != task:
                del data[task]
        out = {"name": self.name, "model": self.model.to_mapping(), "train": to_dict(self.train), "data": data}
        out["train"]["betas"] = list(self.train.betas)
        return out


def component_sources(model: ModelConfig) -> list[ComponentSource]:
    """Where the code of every component `model` uses lives: its attention and MLP,
    and the components their options name by kind (e.g. `preconditioner: {name: ...}`)."""
    out: list[ComponentSource] = []

    def add(spec: registry.ComponentSpec) -> None:
        module = getattr(spec.factory, "__module__", None) or "?"
        file = getattr(sys.modules.get(module), "__file__", None)
        out.append(ComponentSource(module, file, spec.distribution))

    def walk(options: Any) -> None:
        if not dataclasses.is_dataclass(options) or isinstance(options, type):
            return
        for f in dataclasses.fields(options):
            value = getattr(options, f.name)
            name = getattr(value, "name", None)
            if dataclasses.is_dataclass(value) and isinstance(name, str) and registry.names(f.name):
                try:
                    add(registry.get(f.name, name))
                except ConfigError:
                    pass
            walk(value)

    for sublayer in (model.attention, model.mlp):
        add(sublayer.spec)
        walk(sublayer.options)
    return out


TOP_LEVEL_KEYS = ("name", "model", "train", "data")
TRIAL_KEYS = ("lr", "seed")  # what varies between the trials of one variant
# how, not what, a run computes (loss_impl, optimizer_kernel, compile_backend: the same step to rounding,
# like threads)
EXECUTION_KEYS = (
    "threads",
    "ckpt_every_n_steps",
    "log_every_n_steps",
    "loss_impl",
    "optimizer_kernel",
    "compile_backend",
)


def parse_run_config(mapping: Any, path: str = "") -> RunConfig:
    """Validate a whole run config; every problem is a ConfigError naming its key."""
    if isinstance(mapping, RunConfig):
        return mapping
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(path, f"a run config is a mapping of {', '.join(TOP_LEVEL_KEYS)}, got {mapping!r}.")
    for key in mapping:
        if key not in TOP_LEVEL_KEYS:
            raise unknown(join(path, key), key, TOP_LEVEL_KEYS)
    name = mapping.get("name", "run")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(join(path, "name"), f"expected a non-empty string, got {name!r}.")
    if mapping.get("model") is None:
        raise ConfigError(join(path, "model"), "is required (a size preset or d_model, n_layers, n_heads, d_mlp).")
    model = parse_model_config(mapping["model"], join(path, "model"))
    train = parse(TrainConfig, mapping.get("train"), join(path, "train"))
    data = parse(DataConfig, mapping.get("data"), join(path, "data"))
    cfg = RunConfig(model=model, train=train, data=data, name=name)
    _check_consistency(cfg, path)
    return cfg


def _check_consistency(cfg: RunConfig, path: str) -> None:
    """Checks that involve more than one section."""
    train, data = cfg.train, cfg.data
    tokenizer_vocab = data.static_vocab_size()
    if cfg.model.vocab_size is not None and tokenizer_vocab is not None and data.task != "gp":
        require(
            cfg.model.vocab_size >= tokenizer_vocab,
            join(path, "model.vocab_size"),
            f"{cfg.model.vocab_size} is smaller than the {tokenizer_vocab} ids of the data "
            f"({'mqar' if data.task == 'mqar' else data.tokenizer}); leave it unset to follow the data.",
        )
    if data.task != "gp":
        require(
            data.block_size <= cfg.model.max_seq_len,
            join(path, "data.block_size"),
            f"{data.block_size} exceeds model.max_seq_len {cfg.model.max_seq_len}.",
        )
    if data.task == "mqar":
        require(
            data.block_size >= 4 * data.mqar.num_kv_pairs,
            join(path, "data.block_size"),
            f"MQAR needs block_size >= 4 x num_kv_pairs = {4 * data.mqar.num_kv_pairs}.",
        )
    per_step = train.batch_size * train.world_size
    if train.effective_batch is not None:
        require(
            train.effective_batch % per_step == 0,
            join(path, "train.effective_batch"),
            f"{train.effective_batch} is not a multiple of batch_size x devices x num_nodes = {per_step}.",
        )
    if data.streaming:
        require(
            data.num_workers == 0,
            join(path, "data.num_workers"),
            "must be 0 for a streamed source (the stream is read in the main process).",
        )
