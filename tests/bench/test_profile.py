"""bench/profile.py: where a training step's time goes."""

from __future__ import annotations

import json
import time

import pytest
import torch

from cem_ablate import build_model
from cem_ablate.bench.profile import StepProfile, category, profile_step, trace_file
from cem_ablate.bench.train_step import TrainStep, make_optimizer
from cem_ablate.cli.main import main


@pytest.mark.parametrize(
    "name, expected",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
        ("nvjet_tst_128x192_64x4_2x1_v_bz_coopB_TNT", "gemm"),
        ("triton_tem_fused_addmm_3", "gemm"),
        ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4>>", "attention"),
        ("triton_tem_fused_flex_attention_0", "attention"),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
            "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>",
            "loss",
        ),
        ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>", "loss"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
        ("triton_poi_fused__to_copy_add_mul_rsqrt_0", "fused (inductor)"),
        ("aten::mm", "gemm"),
        ("aten::view", "views/allocation (no math)"),
        ("aten::mul", "other elementwise/reduction"),
    ],
)
def test_kernel_and_operator_names_fall_in_their_category(name, expected):
    assert category(name) == expected


def _tiny_step():
    torch.manual_seed(0)
    model = build_model({"size": "tiny", "vocab_size": 256, "max_seq_len": 32})
    step = TrainStep(model, model, make_optimizer(model), "fp32", torch.device("cpu"))
    batch = torch.randint(0, 256, (2, 33), generator=torch.Generator().manual_seed(0))
    step(batch)  # AdamW state allocated before profiling, as after the bench's warm-up
    return step, batch


def test_a_training_step_profile_splits_the_time_by_category():
    step, batch = _tiny_step()
    profile = profile_step(step, batch, steps=2)
    assert profile.device == "cpu" and profile.steps == 2
    assert sum(profile.by_category.values()) == pytest.approx(profile.device_ms_per_step, rel=1e-9)
    assert 0 < profile.busy_fraction <= 1.05
    for part in ("gemm", "loss", "optimizer"):
        assert profile.by_category.get(part, 0) > 0, (part, profile.by_category)
    names = {(e.name, e.category) for e in profile.top}
    assert ("aten::mm", "gemm") in names
    # AdamW's square root is found through the step's optimizer range, not by its name
    assert all(c == "optimizer" for n, c in names if n == "aten::sqrt")
    assert StepProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile


def test_time_outside_any_operator_lowers_the_busy_fraction():
    step, batch = _tiny_step()
    start = time.perf_counter()
    step(batch)
    wall = time.perf_counter() - start

    def waits(b):
        step(b)
        # the device idles, as a GPU does while Python launches the next kernel; 3x the step's
        # own time, so that a loaded machine (a slower step) keeps the idle share (CI failed
        # with a fixed 0.2 s beside a study: busy 0.50, with the sleep 0.38)
        time.sleep(max(0.2, 3 * wall))

    busy = profile_step(step, batch, steps=2).busy_fraction
    idle = profile_step(waits, batch, steps=2).busy_fraction
    assert idle < 0.6 * busy


def test_bench_writes_and_renders_the_profiles(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "--quick",
                "--variants",
                "llama",
                "--memory-variants",
                "--seq-len",
                "16",
                "--repeats",
                "1",
                "--no-tune-allocator",
                "--profile-steps",
                "1",
                "--json",
                str(out),
                "--markdown",
                str(tmp_path / "bench.md"),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "Where the step's time goes" in printed and "#### tiny llama eager fp32" in printed
    row = json.loads(out.read_text())["rows"][0]
    assert row["profile"]["steps"] == 1 and row["profile"]["by_category"]["gemm"] > 0
    # the case's Chrome trace, beside the JSON, named in the JSON and the markdown
    trace = tmp_path / "bench.tiny-llama-eager-fp32.trace.json"
    assert row["profile"]["trace"] == str(trace)
    assert f"Chrome trace with shapes: `{trace}`" in (tmp_path / "bench.md").read_text()
    events = json.loads(trace.read_text())["traceEvents"]
    matmuls = [e for e in events if e.get("name") == "aten::mm"]
    assert matmuls and all(e["args"]["Input Dims"] for e in matmuls)  # record_shapes
    # with_flops: the counted matmul FLOPs lie between the LM head's forward GEMM alone and
    # the whole training step's FLOPs (3x the model report's forward count, docs/design/experiments.md#s7-training-recipe)
    tokens, head = 2 * 16, 64 * 256
    assert 2 * tokens * head < row["profile"]["flops_per_step"] <= row["train_flops_per_token"] * tokens
    assert main(["bench", "--render", str(out)]) == 0
    assert "#### tiny llama eager fp32" in capsys.readouterr().out


def test_trace_file_names_a_case_beside_the_results():
    assert (
        str(trace_file("benchmarks/results/gpu-h100", "86M llama compiled bf16"))
        == "benchmarks/results/gpu-h100.86M-llama-compiled-bf16.trace.json"
    )
    assert trace_file("out/bench", "tiny mine/{x: 1} eager fp32").name == "bench.tiny-mine-x-1-eager-fp32.trace.json"


def test_negative_profile_steps_is_one_error_line(capsys):
    assert main(["bench", "--quick", "--profile-steps", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "profile_steps" in err[0]


def test_cuda_kernels_inside_the_steps_ranges_take_their_category():
    """On CUDA the head + loss unit's kernels are fused Triton kernels; the GPU-side
    annotation of the step's loss range names them (synthetic spans, microseconds)."""
    from cem_ablate.bench.profile import _span_category

    spans = [(100.0, 200.0, "loss"), (300.0, 350.0, "optimizer")]
    assert _span_category(120.0, 130.0, spans) == "loss"
    assert _span_category(300.0, 350.0, spans) == "optimizer"
    assert _span_category(190.0, 210.0, spans) is None  # straddles the end: by its name instead
    assert _span_category(0.0, 10.0, []) is None
