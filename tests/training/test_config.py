"""Run configs: validated at the edge; budgets, accumulation and schedule (docs/design/experiments.md#s7-training-recipe)."""

import math

import pytest

from cem_ablate.config import ConfigError
from cem_ablate.training.budget import accumulation_steps, chinchilla_tokens, resolve_budget
from cem_ablate.training.config import DEFAULT_MAX_STEPS, parse_run_config
from cem_ablate.training.schedule import warmup_cosine
from tests.training.helpers import tiny_run


@pytest.mark.parametrize(
    "section, patch, path",
    [
        ("train", {"lr": -1e-3}, "train.lr"),
        ("train", {"bogus": 1}, "train.bogus"),
        ("train", {"token_budget": 1000, "max_steps": 10}, "train.token_budget"),
        ("train", {"token_budget": "lots"}, "train.token_budget"),
        ("train", {"effective_batch": 12}, "train.effective_batch"),
        ("train", {"precision": "fp8"}, "train.precision"),
        ("train", {"loss_impl": "fused"}, "train.loss_impl"),
        ("data", {"tokenizer": "bpe:x"}, "data.tokenizer"),
        ("data", {"block_size": 4096}, "data.block_size"),
        ("data", {"task": "images"}, "data.task"),
        ("model", {"attention": {"name": "nope"}}, "model.attention.name"),
        ("model", {"d_model": 36, "n_heads": 4}, "model.n_heads"),  # head dim 9: RoPE pairs coordinates
    ],
)
def test_bad_configs_name_the_key(section, patch, path):
    cfg = tiny_run()
    cfg[section].update(patch)
    with pytest.raises(ConfigError) as err:
        parse_run_config(cfg)
    assert str(err.value).startswith(path) and "\n" not in str(err.value)


def test_unknown_top_level_section_and_missing_model():
    with pytest.raises(ConfigError, match="trian"):
        parse_run_config({"model": {"size": "tiny"}, "trian": {}})
    with pytest.raises(ConfigError, match="^model: is required"):
        parse_run_config({"train": {}})


def test_chinchilla_budget_of_the_86m_preset():
    cfg = parse_run_config({"model": {"size": "86M", "vocab_size": 32000}, "train": {"token_budget": "chinchilla"}})
    assert chinchilla_tokens(cfg.model) == 20 * 86_371_488
    budget = resolve_budget(cfg)
    assert budget.requested_tokens == 20 * 86_371_488 and budget.rule == "chinchilla"
    assert budget.tokens >= budget.requested_tokens > budget.tokens - budget.tokens_per_step


def test_chinchilla_budget_counts_the_vocabulary_the_model_is_built_with():
    """One owner for the vocabulary: a byte-tokenizer model's budget is 20 x its own
    Llama baseline (257 ids), not the 32,000-id default."""
    from cem_ablate.model.config import llama_baseline_params
    from cem_ablate.training.engine import resolve_run

    cfg = parse_run_config(
        {"model": {"size": "tiny"}, "train": {"token_budget": "chinchilla"}, "data": {"tokenizer": "byte"}}
    )
    assert cfg.training_model().vocab_size == 257 and cfg.model.vocab_size is None
    baseline = llama_baseline_params(cfg.training_model())
    assert resolve_budget(cfg).requested_tokens == 20 * baseline
    llama = parse_run_config({"model": {"size": "tiny"}, "data": {"tokenizer": "byte"}})
    assert resolve_run(llama).report.params_total == baseline  # the model that trains is that baseline
    # a tokenizer the engine has loaded decides when the config does not say
    assert resolve_budget(cfg, tokenizer_vocab_size=1000).requested_tokens == 20 * llama_baseline_params(
        cfg.training_model(1000)
    )


def test_token_budget_steps_and_accumulation():
    cfg = parse_run_config(tiny_run(max_steps=None, token_budget="1e6", batch_size=4, effective_batch=16, devices=2))
    assert accumulation_steps(cfg.train) == 2
    budget = resolve_budget(cfg)
    assert budget.tokens_per_step == 16 * 64 and budget.steps == math.ceil(1e6 / (16 * 64))
    assert budget.micro_batches == budget.steps * 2
    assert resolve_budget(parse_run_config(tiny_run(max_steps=None))).steps == DEFAULT_MAX_STEPS


def test_config_round_trips_and_vocab_follows_the_tokenizer():
    cfg = parse_run_config(tiny_run())
    assert parse_run_config(cfg.to_mapping()) == cfg
    assert "gp" not in cfg.to_mapping()["data"]  # options of unused tasks are left out
    bpe = parse_run_config({**tiny_run(), "data": {"tokenizer": "bpe:4096"}})
    assert bpe.training_model().vocab_size == 4096
    with pytest.raises(ConfigError, match="model.vocab_size"):
        parse_run_config({**tiny_run(), "model": {"size": "tiny", "vocab_size": 100}})


def test_warmup_cosine_schedule():
    total, warmup, floor = 100, 5, 0.1
    lrs = [warmup_cosine(s, total, warmup, floor) for s in range(total)]
    assert lrs[0] == pytest.approx(1 / 5) and lrs[4] == pytest.approx(1.0) and lrs[5] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(floor)
    assert all(a >= b for a, b in zip(lrs[5:], lrs[6:]))  # monotone decay after warmup


def test_loss_impl_is_an_execution_setting():
    """plain and chunked compute the same loss to rounding (tests/training/test_head_loss.py):
    like threads, the choice changes neither the variant nor the trial identity."""
    plain, chunked = (parse_run_config(tiny_run(loss_impl=impl)) for impl in ("plain", "chunked"))
    assert plain.variant_key() == chunked.variant_key()
    assert parse_run_config(tiny_run()).train.loss_impl == "auto"


def _keyed(model: dict) -> str:
    cfg = tiny_run()
    cfg["model"] = model
    return parse_run_config(cfg).variant_key()


def test_one_model_one_key_whatever_preset_its_overrides_replaced():
    """The key hashes what is built: a preset whose dims are overridden is a label, not a
    model. The mini (4 layers, 4 heads) and small (6 layers) presets with every dim given
    build one model, and so do tiny and mini with the dims they differ in given."""
    dims = {"d_model": 96, "n_layers": 2, "n_heads": 4, "d_mlp": 256}
    spelled = _keyed(dims)
    assert _keyed({"size": "mini", **dims}) == _keyed({"size": "small", **dims}) == spelled
    assert _keyed({"size": "tiny", "d_model": 96, "d_mlp": 256}) == spelled
    assert _keyed({"size": "mini", "d_model": 96, "n_layers": 2, "d_mlp": 256}) == spelled
    assert _keyed({"size": "tiny", "d_model": 96, "d_mlp": 256, "n_layers": 3}) != spelled


def test_a_bare_preset_keeps_its_key():
    """No dim given: the preset's name is hashed as before, so configs that only name a
    preset keep the keys their stores hold (the golden keys: tests/model/test_parametrization.py)."""
    from cem_ablate.config.identity import digest

    cfg = parse_run_config(tiny_run())
    mapping = cfg.to_mapping()
    del mapping["name"]
    for key in (
        "lr",
        "seed",
        "threads",
        "ckpt_every_n_steps",
        "log_every_n_steps",
        "loss_impl",
        "optimizer_kernel",
        "compile_backend",
    ):
        del mapping["train"][key]
    assert cfg.variant_key() == digest(mapping) and mapping["model"]["size"] == "tiny"
