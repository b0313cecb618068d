"""bench/train_parity.py and the bench step's head + loss: the bench runs training's code."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from cem_ablate.bench.config import BenchConfig
from cem_ablate.bench.runner import build_cases
from cem_ablate.bench.train_parity import main, train_config
from cem_ablate.bench.variants import parse_variant
from cem_ablate.training.config import parse_run_config


def test_the_bench_step_loss_is_the_training_formula():
    """Eager llama on CPU: the head + loss unit (plain under `auto`) gives the loss the
    bench computed before the unit existed, bit for bit."""
    cfg = BenchConfig(sizes=["tiny"], seq_len=16, batch_size=2, vocab_size=64)
    (case,) = build_cases([parse_variant("llama")], ["eager"], cfg, "tiny", "fp32", torch.device("cpu"))
    model = case.step.model
    batch = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1).float(), batch[:, 1:].flatten())
    assert case.step.head_loss is not None
    assert case.step(batch) == expected.item()


def test_the_parity_run_trains_the_bench_case():
    cfg = parse_run_config(train_config("cem_attn_t2", "tiny", 32, 2, "bf16", "compiled", "cuda", 10, 256, 5))
    assert cfg.train.precision == "bf16-mixed" and cfg.train.compile and cfg.train.accelerator == "cuda"
    assert cfg.model.attention.name == "cem" and cfg.model.attention.steps == 2
    assert cfg.model.vocab_size == 256 and cfg.data.block_size == 32 and cfg.train.batch_size == 2


@pytest.mark.soak  # in CI the same module through scripts/gpu_check.sh's parity part: tests/bench/test_gpu_check_script.py
def test_train_versus_bench_runs_end_to_end_on_cpu(tmp_path, capsys):
    """Both numbers are measured and reported (a tiny CPU config: no timing claim)."""
    out, js = tmp_path / "parity.md", tmp_path / "parity.json"
    assert (
        main(
            [
                "--device",
                "cpu",
                "--size",
                "tiny",
                "--seq-len",
                "32",
                "--batch-size",
                "2",
                "--precision",
                "fp32",
                "--mode",
                "eager",
                "--steps",
                "4",
                "--repeats",
                "2",
                "--vocab-size",
                "256",
                "--log-every",
                "2",
                "--out",
                str(out),
                "--json",
                str(js),
            ]
        )
        == 0
    )
    result = json.loads(js.read_text())
    assert result["bench_tokens_per_sec"] > 0 and result["train_tokens_per_sec"] > 0
    assert result["ratio"] == pytest.approx(result["train_tokens_per_sec"] / result["bench_tokens_per_sec"])
    assert result["train_status"] == "finished" and result["train_steps"] == 4 and 0 < result["train_mfu"] < 1
    assert math.isfinite(result["ratio"])
    assert "train / bench" in out.read_text() and "train / bench" in capsys.readouterr().out
