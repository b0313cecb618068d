"""`cem-ablate bench`: variants, measurement primitives, targets, and an end-to-end quick run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from cem_ablate import build_model
from cem_ablate.bench.compile_cache import configure_inductor_cache
from cem_ablate.bench.config import BenchConfig
from cem_ablate.bench.measure import step_peak_bytes, time_interleaved
from cem_ablate.bench.results import Row, evaluate_targets, paired_interval, speed_ratio, table, targets_table
from cem_ablate.bench.runner import build_cases
from cem_ablate.bench.variants import model_mapping, parse_variant
from cem_ablate.cli.main import main
from cem_ablate.config.errors import ConfigError


def test_variant_names_map_to_model_configs():
    v = parse_variant("cem_full_t4_ckpt_perhead")
    assert v.sublayers["attention"] == {
        "name": "cem",
        "steps": 4,
        "checkpoint_steps": True,
        "preconditioner": "diag_lowrank",
        "kq_diag": "per_head",
    }
    assert v.sublayers["mlp"]["steps"] == 4 and v.sublayers["mlp"]["checkpoint_steps"] is True
    assert set(parse_variant("cem_attn_t2").sublayers) == {"attention"}
    assert parse_variant("cem_mlp_t1_ref").sublayers == {
        "mlp": {"name": "cem", "steps": 1, "impl": "reference", "preconditioner": "diag_lowrank"}
    }
    assert parse_variant("hf_llama").external and parse_variant("llama").sublayers == {}
    custom = parse_variant("mine={mlp: {name: cem, steps: 3}}")
    assert custom.label == "mine" and custom.sublayers == {"mlp": {"name": "cem", "steps": 3}}
    mapping = model_mapping(parse_variant("cem_attn_t2_sdpa"), "bench", 512, 32000)
    assert (mapping["d_model"], mapping["n_layers"], mapping["n_heads"]) == (512, 6, 8)
    assert mapping["attention"]["kernel"] == "sdpa" and mapping["attention"]["kq_diag"] == "none"


def test_energy_lens_variants_map_to_model_configs():
    """The energy-lens options (docs/design/energy-lens.md#s11-energy-lens) as bench variants: momentum modifiers, the velocity stream, the
    parallel Hopfield block, and model options in the `label={yaml}` form."""
    hb = parse_variant("cem_attn_t2_hb")
    assert hb.sublayers["attention"] == {
        "name": "cem",
        "steps": 2,
        "preconditioner": "diag_lowrank",
        "kq_diag": "shared",
        "update": "heavy_ball",
        "learnable_momentum": True,
    }
    full = parse_variant("cem_full_t4_nesterov")
    assert all(
        full.sublayers[k]["update"] == "nesterov" and full.sublayers[k]["learnable_momentum"]
        for k in ("attention", "mlp")
    )
    stream = model_mapping(parse_variant("llama_nesterov_stream"), "tiny", 32, 100)
    assert stream["stream"] == "nesterov" and "attention" not in stream and "mlp" not in stream
    et = model_mapping(parse_variant("et_parallel_t2"), "bench", 512, 32000)
    assert et["block"] == "parallel" and et["mlp"] == {"name": "hopfield", "steps": 2}
    assert et["attention"]["name"] == "cem" and et["attention"]["steps"] == 2
    custom = parse_variant("mine={attention: {name: cem, steps: 2}, stream: heavy_ball, velocity_norm: rms}")
    assert custom.sublayers == {"attention": {"name": "cem", "steps": 2}}
    assert custom.options == {"stream": "heavy_ball", "velocity_norm": "rms"}
    mapping = model_mapping(custom, "tiny", 32, 100)
    assert (mapping["stream"], mapping["velocity_norm"], mapping["attention"]["steps"]) == ("heavy_ball", "rms", 2)


def test_variant_help_lists_every_modifier_and_model_option():
    """The help text is written out (the CLI does not import the model to print it):
    it must name what the parser accepts."""
    from cem_ablate.bench.variants import MODIFIERS, NAMED
    from cem_ablate.cli.bench_command import VARIANT_HELP
    from cem_ablate.model.config import MODEL_OPTIONS

    for word in [f"_{m}" for m in MODIFIERS] + list(MODEL_OPTIONS) + list(NAMED) + ["et_parallel_t<T>"]:
        assert word in VARIANT_HELP, word


@pytest.mark.parametrize(
    "spec,match",
    [
        ("cem_attn_t2_fast", "modifier 'fast'"),
        ("cem_attn_t2_hb_nesterov", "choose one"),
        ("cem_attn_t1_hb", "learnable_momentum"),  # mu has no effect at T = 1: the model config refuses it
        (
            "et_parallel_t2_hb",
            "update",
        ),  # the joint step is plain gradient descent (docs/design/energy-lens.md#s11-3-energy-transformer-block)
        ("et_parallel_t0", "T must be >= 1"),
        ("mine={stream: nesterow}", "Did you mean 'nesterov'"),
        ("mine={depth: 3}", "keys among attention, mlp, stream"),
        ("gpt2", "unknown variant 'gpt2'"),
        ("mine={attention: {name: cem, kq_diag: diagonal}}", "kq_diag"),
    ],
)
def test_bad_variants_are_config_errors(spec, match):
    with pytest.raises(ConfigError, match=match):
        model_mapping(parse_variant(spec), "tiny", 32, 100)


def test_cli_reports_bad_input_as_one_line(capsys):
    assert main(["bench", "--sizes", "huge"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: bench.sizes[0]: unknown size 'huge'") and "\n" not in err
    assert main(["bench", "--variants", "cem_attn_t0"]) == 2
    assert "T must be >= 1" in capsys.readouterr().err


def test_step_peak_bytes_counts_tensor_allocations_inside_the_step():
    def step(batch):
        a = torch.ones(1_000_000)  # 4 MB
        b = torch.ones(2_000_000)  # 8 MB, peak 12 MB
        del a, b
        c = torch.ones(500_000)  # 2 MB after the peak
        return float(c[0])

    assert step_peak_bytes(step, torch.zeros(1)) == 12_000_000


def test_time_interleaved_rotates_and_samples_every_case():
    order = []
    steps = [lambda b, i=i: order.append(i) for i in range(3)]
    timings = time_interleaved(steps, torch.zeros(1), repeats=3)
    assert [len(t.samples) for t in timings] == [3, 3, 3]
    assert order[:3] == [0, 1, 2] and order[3:6] == [1, 2, 0] and order[6:] == [2, 0, 1]


def test_hf_reference_step_is_the_same_training_step_as_the_baseline():
    """Same weights, same batch: the first losses of llama and hf_llama agree."""
    cfg = BenchConfig(sizes=["tiny"], seq_len=16, batch_size=2, vocab_size=64)
    cases = build_cases(
        [parse_variant("llama"), parse_variant("hf_llama")], ["eager"], cfg, "tiny", "fp32", torch.device("cpu")
    )
    assert [c.row.variant for c in cases] == ["llama", "hf_llama"]
    assert cases[0].row.train_flops_per_token == cases[1].row.train_flops_per_token
    assert cases[0].row.params == cases[1].row.params
    batch = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(0))
    losses = [case.step(batch) for case in cases]
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    assert all(case.step.state_bytes() > 0 for case in cases)


def test_checkpointing_lowers_the_step_peak():
    cfg = BenchConfig(sizes=["tiny"], seq_len=64, batch_size=2, vocab_size=64)
    variants = [parse_variant("cem_full_t4"), parse_variant("cem_full_t4_ckpt")]
    cases = build_cases(variants, ["eager"], cfg, "tiny", "fp32", torch.device("cpu"))
    batch = torch.randint(0, 64, (2, 65), generator=torch.Generator().manual_seed(0))
    peaks = []
    for case in cases:
        case.step(batch)  # allocates AdamW state
        peaks.append(step_peak_bytes(case.step, batch))
    assert peaks[1] < 0.7 * peaks[0]


def _row(variant, tokens_s, mode="eager", peak=None, memory_only=False, flops=1e6):
    """A row of 1000-token steps; tokens_s is one rate or a list of per-round rates."""
    rates = tokens_s if isinstance(tokens_s, list) else [tokens_s] if tokens_s else []
    row = Row(
        size="bench",
        variant=variant,
        mode=mode,
        precision="fp32",
        tokens_per_step=1000,
        params=1,
        train_flops_per_token=flops,
        step_s=[1000 / r for r in rates],
        peak_flops=1e9,
        memory_only=memory_only,
    )
    if peak is not None:
        row.state_bytes, row.step_peak_bytes = 0, peak
    return row


def test_target_ratios_are_paired_and_three_rounds_give_no_interval():
    rows = [
        _row("hf_llama", 500),
        _row("llama", [510, 170, 510]),
        _row("cem_attn_t1", [520, 170, 200]),
        _row("cem_attn_t2", [390, 130, 390], flops=1.25e6),
        _row("llama", 600, mode="compiled"),
        _row("cem_mlp_t2", 480, mode="compiled"),
        _row("cem_full_t1", None, peak=100, memory_only=True),
        _row("cem_full_t4_ckpt", None, peak=140, memory_only=True),
    ]
    # paired: per-round ratios (520/510, 1, 200/510); their median outvotes the noisy third round
    assert speed_ratio(rows, rows[2]) == pytest.approx(1.0)
    assert speed_ratio(rows, rows[2], statistic="best") == pytest.approx(520 / 510)
    assert speed_ratio(rows, rows[2], statistic="median") == pytest.approx(200 / 510)
    targets = {t.name: t for t in evaluate_targets(rows)}
    attn1 = targets["cem_attn_t1 / llama tokens/s, eager"]
    assert attn1.met and attn1.best == pytest.approx(520 / 510)
    assert math.isnan(attn1.low) and math.isnan(attn1.high)  # 3 rounds: no order-statistic interval reaches 95%
    assert attn1.interval_unknown and not attn1.within_noise
    attn2 = targets["cem_attn_t2 / llama tokens/s, eager"]
    assert not attn2.met and attn2.interval_unknown  # 0.765 in every round, < 0.8
    assert not targets["cem_full_t4_ckpt / cem_full_t1 peak memory, eager"].met  # 1.4 > 1.3
    assert targets["cem_mlp_t2 / llama tokens/s, compiled"].measured == pytest.approx(0.8)
    assert targets["cem_mlp_t2 MFU, compiled"].measured == pytest.approx(0.48)
    text = table(rows)
    assert "cem_full_t4_ckpt (memory only)" in text
    assert "| 0.765 | 0.765, 0.765 | 0.780 | 0.800 |" in text  # paired, (best, medians), hf, FLOP bound
    listed = targets_table(list(targets.values()))
    assert (
        "| cem_attn_t1 / llama tokens/s, eager | 1.000 | - | 1.020 | ≥ 1.0 | yes (no 95% interval: fewer than 6 "
        "rounds) |" in listed
    )
    assert (
        "| cem_attn_t2 / llama tokens/s, eager | 0.765 | - | 0.765 | ≥ 0.8 | **no** (no 95% interval: fewer "
        "than 6 rounds) |" in listed
    )


def test_six_rounds_give_the_extreme_rounds_as_the_interval():
    """At 6 rounds the 95% order-statistic interval of the median is [min, max] (coverage
    1 - 2/2^6 = 0.969); 0.95 inside it reads 'within noise'."""
    rows = [
        _row("llama", [500] * 6),
        _row("cem_attn_t1", [520, 170, 500, 500, 505, 495]),
        _row("cem_attn_t2", [390, 392, 388, 391, 389, 390], flops=1.25e6),
    ]
    targets = {t.name: t for t in evaluate_targets(rows)}
    attn1 = targets["cem_attn_t1 / llama tokens/s, eager"]
    assert attn1.low == pytest.approx(170 / 500) and attn1.high == pytest.approx(520 / 500)
    assert attn1.within_noise and not attn1.interval_unknown
    attn2 = targets["cem_attn_t2 / llama tokens/s, eager"]
    assert attn2.high == pytest.approx(392 / 500) and not attn2.met and not attn2.within_noise  # all < 0.8
    assert "| cem_attn_t2 / llama tokens/s, eager | 0.780 | 0.776-0.784 | 0.784 | ≥ 0.8 | **no** |" in targets_table(
        list(targets.values())
    )


@pytest.mark.parametrize("rounds", [6, 8, 12])
def test_paired_interval_covers_the_median_ratio_at_its_level(rounds):
    """Simulated: rounds whose ratios are i.i.d. normal or log-normal around a true median;
    the interval must cover it in >= 95% of 2000 studies up to sampling error (3 binomial
    sds at 0.95 is 0.0146). The percentile bootstrap it replaced covered 0.87 at 4 rounds
    and 0.92 at 8."""
    rng = np.random.default_rng(rounds)
    for draw in (lambda: rng.normal(0.9, 0.03, rounds), lambda: 0.9 * np.exp(rng.normal(0, 0.04, rounds))):
        covered = 0
        for _ in range(2000):
            ratios = draw()
            rows = [_row("llama", [1000.0] * rounds), _row("cem_attn_t2", list(1000.0 * ratios))]
            low, high = paired_interval(rows, rows[1])
            covered += low <= 0.9 <= high
        assert covered / 2000 >= 0.95 - 0.0146


def test_energy_lens_targets_divide_the_paired_ratio_by_the_flop_bound():
    rows = [
        _row("llama", [500] * 6),
        _row("cem_attn_t4", [340] * 6, flops=1.4e6),
        _row("cem_attn_t4_hb", [340, 335, 340, 345, 340, 338], flops=1.4e6),
        _row("et_parallel_t2", [300] * 6, flops=1.25e6),
        _row("llama_nesterov_stream", [470, 490, 480, 485, 475, 480]),
        _row("cem_attn_t2_nesterov_ckpt", [420] * 6, flops=1.1e6),
    ]
    targets = {t.name: t for t in evaluate_targets(rows)}
    lens = {name: t for name, t in targets.items() if "÷ FLOP bound" in name}
    assert sorted(lens) == [
        "cem_attn_t2_nesterov_ckpt / llama tokens/s ÷ FLOP bound 0.909, eager",
        "cem_attn_t4_hb / llama tokens/s ÷ FLOP bound 0.714, eager",
        "et_parallel_t2 / llama tokens/s ÷ FLOP bound 0.800, eager",
        "llama_nesterov_stream / llama tokens/s ÷ FLOP bound 1.000, eager",
    ]  # gd T = 4: none
    hb = lens["cem_attn_t4_hb / llama tokens/s ÷ FLOP bound 0.714, eager"]
    assert hb.measured == pytest.approx(0.68 * 1.4) and hb.met  # per-round ratios 0.67-0.69, median 0.68
    assert hb.low == pytest.approx(0.67 * 1.4) and hb.threshold == 0.95
    parallel = lens["et_parallel_t2 / llama tokens/s ÷ FLOP bound 0.800, eager"]
    assert parallel.measured == pytest.approx(0.75) and not parallel.met
    stream = lens["llama_nesterov_stream / llama tokens/s ÷ FLOP bound 1.000, eager"]
    assert stream.measured == pytest.approx(0.96) and stream.met and stream.within_noise  # rounds 0.94-0.98
    assert stream.low == pytest.approx(0.94) and stream.high == pytest.approx(0.98)


def test_inductor_cache_goes_to_the_project_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("CEM_ABLATE_CACHE", str(tmp_path))
    path = configure_inductor_cache()
    assert path == tmp_path / "inductor" and path.is_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(path.resolve())
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert cache_dir() == str(path.resolve())
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert configure_inductor_cache() == tmp_path / "mine"  # the user's choice wins


ALLOCATOR_PROBE = """
import resource, torch
from cem_ablate.bench.cpu_allocator import tune_cpu_allocator

def faults_per_alloc():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        torch.empty(16_000_000).fill_(1.0)  # 64 MB, above glibc's default mmap threshold
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5

default = faults_per_alloc()
assert tune_cpu_allocator() is True
for _ in range(3):  # the heap grows over the first rounds, then serves every tensor
    faults_per_alloc()
print(default, faults_per_alloc())
"""


def test_allocator_tuning_stops_page_faults_on_large_tensors():
    """In a subprocess: the tuning is process-wide and irreversible."""
    out = subprocess.run([sys.executable, "-c", ALLOCATOR_PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    default, tuned = map(float, out.stdout.split())
    assert default > 10_000  # every 64 MB tensor faults its ~16k pages in again
    assert tuned < 0.1 * default


def test_quick_bench_end_to_end(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench",
            "--quick",
            "--variants",
            "hf_llama",
            "llama",
            "cem_attn_t1",
            "--memory-variants",
            "cem_full_t1",
            "cem_full_t2_ckpt",
            "--seq-len",
            "16",
            "--no-tune-allocator",
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "bench.md"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "| tiny | cem_attn_t1 | eager | fp32 |" in printed and "CPU and energy-lens targets" in printed
    data = json.loads(out.read_text())
    rows = {(r["variant"], r["memory_only"]): r for r in data["rows"]}
    assert set(rows) == {
        ("hf_llama", False),
        ("llama", False),
        ("cem_attn_t1", False),
        ("cem_full_t1", True),
        ("cem_full_t2_ckpt", True),
    }
    for key in [("hf_llama", False), ("llama", False), ("cem_attn_t1", False)]:
        row = rows[key]
        assert len(row["step_s"]) == 2 and row["tokens_per_s_median"] > 0
        assert 0 < row["mfu"] < 1 and row["peak_bytes"] > row["state_bytes"] > 0
    assert rows[("llama", False)]["ratio_vs_llama"] == 1.0
    assert math.isfinite(rows[("llama", False)]["ratio_vs_hf_llama"])
    assert rows[("cem_full_t2_ckpt", True)]["peak_bytes"] > 0 and rows[("cem_full_t1", True)]["step_s"] == []
    assert data["meta"]["allocator_tuned"] is False and data["meta"]["peak_flops"]["tiny/fp32"]["peak"] > 1e9
    assert (tmp_path / "bench.md").read_text().startswith("| size | variant |")
    assert main(["bench", "--render", str(out)]) == 0  # the same tables, from the file alone
    assert capsys.readouterr().out.strip() == printed.split("\n\n", 1)[1].rsplit("\n\nwrote", 1)[0].strip()


def test_quick_bench_of_energy_lens_variants(tmp_path):
    """A smoke run: the new variants build, step and get a FLOP-bound ratio (no timing asserted)."""
    out = tmp_path / "bench.json"
    variants = ["llama", "cem_attn_t2_hb", "llama_nesterov_stream", "et_parallel_t2"]
    assert (
        main(
            [
                "bench",
                "--quick",
                "--variants",
                *variants,
                "--memory-variants",
                "--seq-len",
                "16",
                "--repeats",
                "1",
                "--no-tune-allocator",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    rows = {r["variant"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(variants)
    for name in variants:
        assert rows[name]["error"] is None and rows[name]["tokens_per_s_median"] > 0
        assert rows[name]["flop_bound_ratio_vs_llama"] > 0
    assert rows["cem_attn_t2_hb"]["flop_bound_ratio_vs_llama"] < 1  # two attention steps per layer
    assert rows["llama_nesterov_stream"]["params"] > rows["llama"]["params"]  # one learnable mu per sublayer


def test_mfu_flops_are_flop_counter_plus_the_attention_scores_it_misses():
    """The per-module FLOP count the MFU uses = FlopCounterMode's count + the SDPA score
    FLOPs it reports as 0 for the CPU flash kernel (4 · (J+1)/2 · D per token and layer)."""
    from torch.utils.flop_counter import FlopCounterMode

    from cem_ablate.model import model_report

    model = build_model({"size": "tiny", "vocab_size": 100, "max_seq_len": 64})
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 100, (2, 64)))
    report = model_report(model, seq_len=64)
    d, layers, tokens = model.dims.d_model, model.dims.n_layers, 2 * 64
    sdpa = 4 * (64 + 1) / 2 * d * layers * tokens
    assert report.flops_per_token * tokens == pytest.approx(counter.get_total_flops() + sdpa, rel=1e-9)


def test_cpu_contention_is_measured_and_flagged():
    from cem_ablate.bench.measure import CPUContention
    from cem_ablate.bench.results import contention_note

    with CPUContention() as contention:
        sum(range(100_000))
    if os.path.exists(CPUContention.PATH):
        assert contention.share is not None and contention.share >= 0
    quiet, busy = _row("llama", 500), _row("llama", 500)
    quiet.cpu_contention, busy.cpu_contention = 0.02, 0.6
    assert contention_note([quiet]) == ""
    assert "60%" in contention_note([quiet, busy]) and "unreliable" in contention_note([busy])


def test_memory_only_run_prints_no_profiler_chatter(tmp_path, capfd):
    """`--variants` with no names measures memory only; libkineto's USDT lines stay hidden."""
    out = tmp_path / "mem.json"
    code = main(
        [
            "bench",
            "--quick",
            "--variants",
            "--memory-variants",
            "cem_full_t1",
            "cem_full_t4_ckpt",
            "--no-tune-allocator",
            "--json",
            str(out),
        ]
    )
    captured = capfd.readouterr()
    assert code == 0
    assert "USDT" not in captured.err + captured.out
    rows = json.loads(out.read_text())["rows"]
    assert [(r["variant"], r["memory_only"]) for r in rows] == [("cem_full_t1", True), ("cem_full_t4_ckpt", True)]
    assert "| cem_full_t4_ckpt / cem_full_t1 peak memory, eager |" in captured.out


def test_default_precisions_follow_native_bf16(monkeypatch):
    from cem_ablate.bench import config as bench_config

    monkeypatch.setattr(bench_config, "native_bf16", lambda device: False)
    assert bench_config.resolve_precisions(BenchConfig()) == ["fp32"]
    monkeypatch.setattr(bench_config, "native_bf16", lambda device: True)
    assert bench_config.resolve_precisions(BenchConfig()) == ["fp32", "bf16"]
    assert bench_config.resolve_precisions(BenchConfig(precisions=["bf16"])) == ["bf16"]


def _gpu_row(variant, tokens_s, mode="eager", size="86M", peak=None, memory_only=False, flops=1e6):
    row = _row(variant, tokens_s, mode=mode, peak=peak, memory_only=memory_only, flops=flops)
    row.size, row.precision, row.peak_flops = size, "bf16", 1e9
    return row


def test_gpu_targets_speed_flop_bound_mfu_and_memory_per_size():
    from cem_ablate.bench.results import evaluate_gpu_targets

    rows = [
        _gpu_row("hf_llama", 500),
        _gpu_row("llama", 520),
        _gpu_row("cem_attn_t1", 460),
        _gpu_row("cem_attn_t2", 300, flops=1.5e6),  # FLOP bound 0.667; 300/520 = 0.577 = 0.865 of it
        _gpu_row("llama", 400, mode="compiled"),
        _gpu_row("cem_full_t2", 280, mode="compiled", flops=1.4e6),
        _gpu_row("cem_attn_t1_blocked", 100),  # no target of its own
        _gpu_row("cem_full_t1", None, peak=100, memory_only=True),
        _gpu_row("cem_full_t8_ckpt", None, peak=150, memory_only=True),
    ]
    targets = {t.name: t for t in evaluate_gpu_targets(rows, ["86M"])}
    assert set(targets) == {
        "86M: llama / hf_llama tokens/s, eager",
        "86M: cem_attn_t1 / llama tokens/s, eager",
        "86M: cem_attn_t2 / llama tokens/s ÷ FLOP bound 0.667, eager",
        "86M: cem_full_t2 / llama tokens/s ÷ FLOP bound 0.714, compiled",
        "86M: llama MFU, compiled",
        "86M: cem_full_t8_ckpt / cem_full_t1 peak memory, eager",
    }
    assert targets["86M: llama / hf_llama tokens/s, eager"].measured == pytest.approx(520 / 500)
    attn1 = targets["86M: cem_attn_t1 / llama tokens/s, eager"]
    assert attn1.measured == pytest.approx(460 / 520) and not attn1.met  # 0.885 < 0.9
    attn2 = targets["86M: cem_attn_t2 / llama tokens/s ÷ FLOP bound 0.667, eager"]
    assert attn2.measured == pytest.approx(300 / 520 * 1.5) and not attn2.met
    full2 = targets["86M: cem_full_t2 / llama tokens/s ÷ FLOP bound 0.714, compiled"]
    assert full2.measured == pytest.approx(280 / 400 * 1.4) and full2.met  # 0.98 >= 0.9
    mfu = targets["86M: llama MFU, compiled"]
    assert mfu.measured == pytest.approx(0.4) and mfu.threshold == 0.45 and not mfu.met
    memory = targets["86M: cem_full_t8_ckpt / cem_full_t1 peak memory, eager"]
    assert memory.measured == pytest.approx(1.5) and memory.met


def test_cuda_bench_without_a_gpu_is_one_error_line(tmp_path):
    """Without a GPU, a CUDA bench is an error, not a CPU run: exit 2, one line saying there is
    no CUDA device, nothing written."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    for flags in (["--device", "cuda"], ["--gpu"]):
        proc = subprocess.run(
            [sys.executable, "-m", "cem_ablate.cli.main", "bench", *flags],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: bench.device: ") and "no CUDA device" in lines[0]
        assert proc.stdout == "" and list(tmp_path.iterdir()) == []


def test_gpu_slugs_name_result_files():
    from cem_ablate.training.hardware import gpu_peak_flops, gpu_slug

    assert gpu_slug("NVIDIA H100 80GB HBM3") == "h100" and gpu_slug("NVIDIA H100 PCIe") == "h100-pcie"
    assert gpu_slug("NVIDIA H200") == "h200" and gpu_slug("NVIDIA GH200 480GB") == "gh200"
    assert gpu_slug("Some GPU 9000") == "some-gpu-9000"
    assert gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989e12
    assert gpu_peak_flops("NVIDIA H200", "bf16-mixed") == 989e12


def test_attention_kernel_names_per_device():
    from cem_ablate.bench.runner import attention_kernel

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert attention_kernel(parse_variant("llama"), cuda) == "sdpa (torch)"
    assert attention_kernel(parse_variant("cem_attn_t1"), cpu) == "blocked"
    assert attention_kernel(parse_variant("cem_mlp_t2"), cuda) == "sdpa (torch)"
    assert attention_kernel(parse_variant("cem_attn_t1_blocked"), cuda) == "blocked"
    assert attention_kernel(parse_variant("cem_attn_t1_exact"), cuda) == "blocked"
    assert attention_kernel(parse_variant("cem_attn_t1_sdpa"), cuda) == "sdpa"
    import components.cem_attention_kernels as kernels

    if kernels.FLEX_AVAILABLE:
        assert attention_kernel(parse_variant("cem_full_t2"), cuda) == "flex"
