"""The paper's study files (docs/design/experiments.md#s6-experiments-as-axes): valid at every scale, the paper's recipe and
variants at paper scale, CPU-sized at the `cpu` and `smoke` scales.

Paper scale is never run here (no GPU, no network for SlimPajama): it is checked
through validation and the dry-run plan. The smoke runs are in test_smoke_runs.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cem_ablate.cli.main import main
from cem_ablate.cli.study_command import load_expanded
from cem_ablate.model.config import llama_baseline_params, parse_model_config
from cem_ablate.study.estimates import estimate
from cem_ablate.study.spec import PAPER_LR_GRID

STUDIES = Path(__file__).resolve().parents[2] / "studies"
LM_FIGURES = [
    "fig2a_cem_attention",
    "fig2b_cem_mlp",
    "fig2c_attention_recursion",
    "fig2d_mlp_recursion",
    "fig3a_full_cem_lr",
    "fig3b_kq_diagonal",
    "fig3c_mlp_recursion_vs_reuse",
    "fig4_attention_recursion_vs_reuse",
]
GP_TABLE = "table3_gp"
PAPER_SIZES = ["86M", "108M", "134M", "162M"]
SLIMPAJAMA = "gmongaras/SlimPajama-627B_Reupload"


def path_of(name: str) -> str:
    return str(STUDIES / f"{name}.yaml")


def variants(name: str, scale: str | None = None):
    return load_expanded(path_of(name), scale, []).variants


def run_config(variant, lr=2e-3, seed=0):
    return variant.run_config(lr, seed)


def sublayer(variant, kind: str) -> dict:
    return run_config(variant).model.to_mapping()[kind]


def test_every_study_of_the_paper_has_a_file():
    assert {p.stem for p in STUDIES.glob("*.yaml")} >= set(LM_FIGURES) | {GP_TABLE}


@pytest.mark.parametrize("scale", [None, "cpu", "smoke"])
@pytest.mark.parametrize("name", LM_FIGURES + [GP_TABLE])
def test_every_scale_validates_and_names_its_own_experiment(name, scale):
    expanded = load_expanded(path_of(name), scale, [])
    assert expanded.variants
    if name != GP_TABLE:  # the GP study has no paper scale: its default is the CPU run
        assert expanded.spec.name == name + (f"_{scale}" if scale else "")


@pytest.mark.parametrize("name", LM_FIGURES)
def test_paper_scale_is_the_papers_recipe(name):
    expanded = load_expanded(path_of(name), None, [])
    assert tuple(expanded.spec.lr_search.grid) == PAPER_LR_GRID
    assert expanded.spec.lr_search.interpolation == "akima"
    for v in expanded.variants:
        cfg = run_config(v)
        assert cfg.model.size in PAPER_SIZES and cfg.model.max_seq_len == 2048
        assert (cfg.data.source, cfg.data.streaming, cfg.data.block_size) == (SLIMPAJAMA, True, 2048)
        assert "llama" in cfg.data.tokenizer
        train = cfg.train
        assert train.token_budget == "chinchilla" and train.precision == "bf16-mixed"
        assert train.batch_size * train.devices * (train.effective_batch // (train.batch_size * train.devices)) == 128
        assert (train.betas, train.eps, train.weight_decay, train.grad_clip) == ((0.9, 0.95), 1e-9, 0.1, 1.0)
        assert (train.warmup_frac, train.final_lr_frac) == (0.05, 0.1)


def test_chinchilla_budget_is_twenty_tokens_per_llama_parameter():
    """A CEM variant trains on its Llama baseline's tokens (docs/design/experiments.md#s7-training-recipe), in whole steps."""
    by_name = {v.name: v for v in variants("fig2a_cem_attention")}
    for size in PAPER_SIZES:
        cem, llama = (estimate(run_config(by_name[f"{n},size={size}"])) for n in ("cem_attention", "llama"))
        tokens_per_step = 128 * 2048
        baseline = llama_baseline_params(parse_model_config({"size": size}))
        expected = math.ceil(20 * baseline / tokens_per_step) * tokens_per_step
        assert cem.tokens == llama.tokens == expected
        assert cem.params_total < llama.params_total == baseline


def _role(name, scale=None):
    out = {}
    for v in variants(name, scale):
        out.setdefault(v.role, []).append(v)
    return out


def _sizes(vs):
    return sorted({run_config(v).model.size for v in vs}, key=PAPER_SIZES.index)


@pytest.mark.parametrize(
    "name, sizes",
    [(n, PAPER_SIZES) for n in LM_FIGURES if n != "fig3a_full_cem_lr"] + [("fig3a_full_cem_lr", PAPER_SIZES[:3])],
)
def test_every_variant_is_paired_with_the_llama_of_its_size(name, sizes):
    roles = _role(name)
    by_key = {v.key: v for v in variants(name)}
    assert _sizes(roles["variant"]) == sizes
    assert _sizes(roles["baseline"]) == sizes and len(roles["baseline"]) == len(sizes)
    for v in roles["variant"]:
        base = by_key[v.baselines["llama"]]
        assert run_config(base).model.size == run_config(v).model.size
        assert sublayer(base, "attention")["name"] == "llama" and sublayer(base, "mlp")["name"] == "llama"
        assert sublayer(base, "attention")["steps"] == sublayer(base, "mlp")["steps"] == 1


def _signature(v, kind):
    s = sublayer(v, kind)
    return (s["name"], s["steps"], s["depth_mode"], (s.get("preconditioner") or {}).get("name"), s.get("kq_diag"))


def _variant_signatures(name, kind):
    return {_signature(v, kind) for v in _role(name)["variant"]}


def _fixed(name, kind):
    return {sublayer(v, kind)["name"] for v in _role(name)["variant"]}


def test_fig2_variants_are_the_papers():
    assert _variant_signatures("fig2a_cem_attention", "attention") == {("cem", 1, "recursion", "identity", "shared")}
    assert _fixed("fig2a_cem_attention", "mlp") == {"llama"}
    assert {s[:4] for s in _variant_signatures("fig2b_cem_mlp", "mlp")} == {
        ("cem", 1, "recursion", "identity"),
        ("cem_param_matched", 1, "recursion", "identity"),
    }
    assert _fixed("fig2b_cem_mlp", "attention") == {"llama"}
    grid = {("cem", t, "recursion", p, "shared") for t in (1, 2) for p in ("diag", "diag_lowrank")}
    assert _variant_signatures("fig2c_attention_recursion", "attention") == grid
    assert _fixed("fig2c_attention_recursion", "mlp") == {"llama"}
    assert {s[:4] for s in _variant_signatures("fig2d_mlp_recursion", "mlp")} == {s[:4] for s in grid}
    assert _fixed("fig2d_mlp_recursion", "attention") == {"llama"}


def test_fig3_and_fig4_variants_are_the_papers():
    full = [v for v in _role("fig3a_full_cem_lr")["variant"]]
    assert {_signature(v, "attention") for v in full} == {("cem", 2, "recursion", "diag_lowrank", "shared")}
    assert {_signature(v, "mlp")[:4] for v in full} == {("cem", 2, "recursion", "diag_lowrank")}
    assert {sublayer(v, "attention")["preconditioner"]["rank"] for v in full} == {4}
    assert {sublayer(v, "mlp")["preconditioner"]["rank"] for v in full} == {16}
    assert _variant_signatures("fig3b_kq_diagonal", "attention") == {
        ("cem", 1, "recursion", "diag", kq) for kq in ("none", "shared", "per_head")
    }
    assert _fixed("fig3b_kq_diagonal", "mlp") == {"llama"}
    assert {s[:3] for s in _variant_signatures("fig3c_mlp_recursion_vs_reuse", "mlp")} == {
        ("llama", 2, "reuse"),
        ("cem", 1, "recursion"),
        ("cem", 2, "recursion"),
        ("cem_param_matched", 1, "recursion"),
        ("cem_param_matched", 2, "recursion"),
    }
    assert _fixed("fig3c_mlp_recursion_vs_reuse", "attention") == {"llama"}
    assert {s[:3] for s in _variant_signatures("fig4_attention_recursion_vs_reuse", "attention")} == {
        ("llama", 2, "reuse"),
        ("cem", 1, "recursion"),
        ("cem", 2, "recursion"),
    }
    assert _fixed("fig4_attention_recursion_vs_reuse", "mlp") == {"llama"}


def test_gp_study_is_table_3():
    expanded = load_expanded(path_of(GP_TABLE), None, [])
    assert len(expanded.spec.seeds) >= 3
    seen = set()
    params = set()
    for v in expanded.variants:
        cfg = run_config(v)
        assert cfg.data.task == "gp" and cfg.data.gp.dim == 10 and cfg.model.mlp.name == "cem"
        assert cfg.model.mlp.depth_mode == "recursion"
        seen.add((cfg.model.mlp.steps, cfg.data.gp.kernel))
        params.add(estimate(cfg).params_total)
    assert seen == {(t, k) for t in (1, 2, 4, 8) for k in ("rbf", "nonstationary")}
    assert len(params) == 1  # recursion adds compute, not parameters


# Optimizer steps per trial: a GP step is one batch of 64 ten-dimensional inputs.
MAX_STEPS = {("cpu", "text"): 300, ("cpu", "gp"): 1000, ("smoke", "text"): 10, ("smoke", "gp"): 10}


@pytest.mark.parametrize("scale", ["cpu", "smoke"])
@pytest.mark.parametrize("name", LM_FIGURES + [GP_TABLE])
def test_cpu_scales_are_cpu_sized_and_offline(name, scale):
    expanded = load_expanded(path_of(name), scale, [])
    trials = len(expanded.spec.lr_search.grid) * len(expanded.spec.seeds)
    for v in expanded.variants:
        cfg = run_config(v)
        cost = estimate(cfg)
        assert cfg.train.devices == 1 and cfg.train.num_nodes == 1 and cfg.train.precision == "auto"
        assert cost.steps <= MAX_STEPS[scale, cfg.data.task]
        assert cost.params_total < 2_000_000
        if cfg.data.task == "text":
            assert (cfg.data.source, cfg.data.tokenizer, cfg.data.streaming) == ("stdlib", "byte", False)
            assert cfg.model.size == "tiny" and cfg.data.block_size <= 128
    if scale == "smoke":
        assert len(expanded.variants) * trials <= 24


def test_dry_run_lists_the_papers_variants_and_budgets(capsys):
    assert main(["study", path_of("fig2a_cem_attention"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for size in PAPER_SIZES:
        assert f"cem_attention,size={size}" in out and f"llama,size={size} (baseline)" in out
    assert "86,371,488" in out and "162,813,024" in out  # Table 1, docs/design/layers.md#s1-llama-baseline
    assert "1.73G" in out and "6,590" in out  # 20 x 86.4M tokens = 6,590 steps of 128 x 2048
    assert "0.0005, 0.001, 0.002, 0.004, 0.008" in out
    assert "total: 40 trials" in out and "GPU-hours" in out
