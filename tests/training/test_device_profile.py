"""The device profile (training/device_profile.py), and the CUDA profile rehearsed on this CPU.

The GPU path's choices (bf16-mixed, fused AdamW, clipping, compile, the chunked head + loss,
the host reading the loss on check steps only) meet nowhere but on a GPU, and a GPU is lent
only now and then: a default `cem-ablate train` on a GPU once died on its first step
(Lightning refused to clip for a fused AdamW under bf16-mixed) with every CPU test green.
Here the real `cem-ablate train` (Lightning, in-process CLI) trains every family with the
CUDA profile's choices forced on the CPU, beside the same run under the CPU profile, and so
do DDP (two gloo processes) and a study trial through a worker.

What CPU torch cannot run is listed in `NOT_ON_CPU`, each with its reason, checked where it
can be (a probe that expects the refusal: when a torch release lifts it, the probe fails and
the choice joins the rehearsal).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from cem_ablate.bench.variants import model_mapping, parse_variant
from cem_ablate.config import ConfigError
from cem_ablate.training.config import TrainConfig, parse_run_config
from cem_ablate.training.device_profile import DeviceProfile, resolve_device_profile
from tests.data.conftest import isolated_cache  # noqa: F401  (session-wide autouse fixture)
from tests.training.helpers import cli_process

SEQ = 32
STEPS = 6
VOCAB = 64

# the families of the zoo, by the bench's variant names (bench/variants.py: one owner of the mapping)
FAMILIES = {
    "llama": "llama",
    "cem_attention_t1": "cem_attn_t1",
    "cem_attention_t2": "cem_attn_t2",
    "cem_mlp": "cem_mlp_t2",
    "cem_full": "cem_full_t2",
    "energy_lens": "et_parallel_t2",  # CEM attention + Hopfield MLP, parallel block
}
MUP = {"parametrization": "mup", "base_d_model": 32}

NOT_ON_CPU = {
    "flex attention (CEM attention's kernel on CUDA)": "FlexAttention has no backward on CPU; CEM attention "
    "trains with its blocked kernel here (same function)",
    "inductor's GPU code (Triton kernels)": "CPU inductor writes C++, another code generator, and compiling it "
    "costs minutes per family; the rehearsal compiles with aot_eager: "
    "dynamo's capture and AOT autograd, the device-independent half",
    "NCCL (DDP's backend on CUDA)": "NCCL needs CUDA devices; the DDP rehearsal runs gloo",
    "fused AdamW's CUDA kernel": "CPU torch has its own fused AdamW: the same option, another kernel",
}


def cuda_profile(train: TrainConfig) -> DeviceProfile:
    """What a bf16 GPU runs for `train`, with compile on (the GPU bench's and parity's mode),
    compiled through aot_eager here (NOT_ON_CPU)."""
    train = dataclasses.replace(train, compile=True, compile_backend="aot_eager")
    return resolve_device_profile(train, "cuda", device_has_bf16=True)


def family_config(name: str, family: str, **train) -> dict:
    model = MUP | {"size": "tiny"} if family == "mup" else model_mapping(parse_variant(family), "tiny", SEQ, VOCAB)
    model = dict(model, vocab_size=VOCAB, max_seq_len=SEQ)
    return {
        "name": name,
        "model": model,
        "train": {
            "lr": 3e-3,
            "batch_size": 4,
            "max_steps": STEPS,
            "warmup_frac": 0.0,
            "val_every_n_steps": STEPS,
            "val_batches": 1,
            "test_batches": 1,
            "ckpt_every_n_steps": STEPS,
            "log_every_n_steps": 2,
            "seed": 0,
            **train,
        },
        "data": {
            "task": "mqar",
            "block_size": SEQ,
            "mqar": {"vocab_size": VOCAB, "num_kv_pairs": 4, "n_train": 256, "n_val": 8, "n_test": 8},
        },
    }


def forced(mapping: dict, profile: DeviceProfile) -> dict:
    """`mapping` with every choice of `profile` written into its train section."""
    cfg = parse_run_config(mapping)
    return dataclasses.replace(cfg, train=profile.forcing(cfg.train)).to_mapping()


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory) -> str:
    """One MLflow store for the module's runs (a new SQLite store costs seconds of migrations)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def train_cli(mapping: dict, folder: Path, capsys, tracking_uri: str) -> tuple[dict, str]:
    """`cem-ablate train` on `mapping` (in-process CLI): its result.json and what it printed."""
    from cem_ablate.cli.main import main

    path = folder / f"{mapping['name']}.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    run_dir = folder / mapping["name"]
    code = main(["train", str(path), "--run-dir", str(run_dir), "--tracking-uri", tracking_uri, "--no-progress"])
    printed = capsys.readouterr().out
    result = json.loads((run_dir / "result.json").read_text())
    assert code == 0, (result.get("error"), printed[-2000:])
    return result, printed


# -- resolution ---------------------------------------------------------------------------


def test_the_cuda_profile_is_the_gpu_recipe_and_the_cpu_profile_keeps_earlier_results():
    gpu = resolve_device_profile(TrainConfig(), "cuda", device_has_bf16=True)
    assert (gpu.accelerator, gpu.precision, gpu.optimizer_kernel, gpu.loss_impl) == (
        "gpu",
        "bf16-mixed",
        "fused",
        "chunked",
    )
    assert gpu.grad_clip == TrainConfig().grad_clip > 0 and gpu.strategy == "auto" and gpu.ddp_backend is None
    cpu = resolve_device_profile(TrainConfig(), "cpu")
    assert (cpu.accelerator, cpu.precision, cpu.optimizer_kernel, cpu.loss_impl) == (
        "cpu",
        "32-true",
        "single",
        "plain",
    )
    old_gpu = resolve_device_profile(TrainConfig(), "cuda", device_has_bf16=False)  # a V100: no bf16
    assert old_gpu.precision == "32-true" and old_gpu.optimizer_kernel == "fused"
    ddp = resolve_device_profile(TrainConfig(devices=2), "cuda", device_has_bf16=True)
    assert (ddp.strategy, ddp.ddp_backend) == ("ddp", "nccl")
    assert resolve_device_profile(TrainConfig(devices=2), "cpu").ddp_backend == "gloo"


def test_fp16_with_clipping_gets_foreach_and_an_explicit_fused_is_refused_before_training():
    fp16 = TrainConfig(precision="16-mixed")
    assert resolve_device_profile(fp16, "cuda").optimizer_kernel == "foreach"  # fused would unscale after the clip
    assert resolve_device_profile(dataclasses.replace(fp16, grad_clip=0.0), "cuda").optimizer_kernel == "fused"
    mapping = family_config("fp16", "llama", precision="16-mixed", optimizer_kernel="fused")
    with pytest.raises(ConfigError) as err:
        parse_run_config(mapping)
    assert err.value.path == "train.optimizer_kernel" and "grad_clip" in str(err.value)
    with pytest.raises(ConfigError, match="optimizer_kernel"):
        parse_run_config(family_config("typo", "llama", optimizer_kernel="fast"))


def test_the_optimizer_kernel_is_an_execution_setting_not_a_variant():
    a = parse_run_config(family_config("a", "llama"))
    b = parse_run_config(family_config("a", "llama", optimizer_kernel="foreach"))
    assert a.variant_key() == b.variant_key()


def test_the_profile_forced_on_another_device_names_every_choice():
    profile = cuda_profile(TrainConfig())
    train = profile.forcing(TrainConfig())
    assert resolve_device_profile(train, "cpu") == dataclasses.replace(profile, device_type="cpu", accelerator="cpu")


def test_dry_run_prints_the_profile(tmp_path, capsys):
    from cem_ablate.cli.main import main

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(family_config("dry", "cem_attn_t1", max_steps=2)))
    assert main(["train", str(path), "--dry-run"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("device profile:"))
    assert "precision 32-true" in line and "AdamW single" in line and "clip norm 1" in line
    assert not list(tmp_path.glob("runs")) and not (tmp_path / "mlruns").exists()  # nothing created


# -- the rehearsal ---------------------------------------------------------------------------


def test_flex_attention_still_has_no_backward_on_cpu():
    """The first entry of NOT_ON_CPU, checked: when CPU torch gains flex's backward, this fails
    and CEM attention's flex kernel joins the rehearsal (model.attention.kernel: flex)."""
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 1, 16, 16, requires_grad=True)
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        flex_attention(q, q, q)


@pytest.mark.parametrize("family", [*FAMILIES, "mup"])
def test_the_cuda_profile_trains_every_family_on_cpu(family, tmp_path, capsys, tracking_uri):
    """`cem-ablate train` with bf16-mixed, fused AdamW, clipping, compile and the chunked head +
    loss forced on this CPU: it trains, logs the profile it ran with, and its losses stay near
    the CPU profile's (fp32, single-tensor AdamW, eager, plain loss) over the same steps and data."""
    from mlflow import MlflowClient

    variant = FAMILIES.get(family, "mup")
    base = family_config(f"{family}-cpu", variant)
    cpu, _ = train_cli(base, tmp_path, capsys, tracking_uri)
    profile = cuda_profile(parse_run_config(base).train)
    gpu, printed = train_cli(dict(forced(base, profile), name=f"{family}-cuda"), tmp_path, capsys, tracking_uri)
    params = MlflowClient(tracking_uri).get_run(gpu["mlflow_run_id"]).data.params
    logged = dataclasses.replace(profile, device_type="cpu", accelerator="cpu").params()
    assert {k: v for k, v in params.items() if k in logged} == logged
    if variant.startswith("cem_attn"):  # what the component runs on this device
        assert params["device.attention.CEMAttention"] == "blocked"
    assert "precision bf16-mixed, AdamW fused, clip norm 1, compile on (aot_eager), head + loss chunked" in printed
    for result in (cpu, gpu):
        assert result["status"] == "finished" and result["steps"] == STEPS, result.get("error")
        assert math.isfinite(result["train_loss"]) and math.isfinite(result["test_loss"])
    # bf16 autocast rounds every matmul input to 8 bits of mantissa: the losses drift apart a
    # little, far less than a wrong step (a missed clip, an unscaled update) would move them
    assert gpu["train_loss"] == pytest.approx(cpu["train_loss"], rel=0.03)
    assert gpu["test_loss"] == pytest.approx(cpu["test_loss"], rel=0.03)


def test_the_cuda_profile_trains_under_ddp_on_two_cpu_processes(tmp_path, isolated_cache):
    """DDP's path (two gloo ranks, Lightning re-running the command) with the CUDA profile's
    choices: the clip sees the all-reduced gradients, fused AdamW steps both ranks alike."""
    base = family_config("ddp", "cem_attn_t1", devices=2)
    mapping = forced(base, cuda_profile(parse_run_config(base).train))
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    done = cli_process(
        "train",
        path,
        "--run-dir",
        tmp_path / "run",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        "--no-progress",
        cwd=tmp_path,
        cache=isolated_cache,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "AdamW fused, clip norm 1, compile on (aot_eager), head + loss chunked" in done.stdout
    assert "ddp (gloo)" in done.stdout
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "finished" and result["steps"] == STEPS
    assert result["tokens_seen"] == STEPS * 2 * 4 * SEQ  # two ranks' batches per step
    assert math.isfinite(result["train_loss"]) and math.isfinite(result["test_loss"])
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ddp").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["device.ddp_backend"] == "gloo"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")]
    assert len(steps) == len(set(steps)) == STEPS // 2  # logged once per logging step, by rank 0 only


def test_a_study_trial_through_a_worker_trains_with_the_cuda_profile(tmp_path, isolated_cache):
    from mlflow import MlflowClient

    base = family_config("base", "llama")
    mapping = forced(base, cuda_profile(parse_run_config(base).train))
    study = {
        "name": "cudaprofile",
        "base": {k: mapping[k] for k in ("model", "train", "data")},
        "variants": [{"name": "llama"}],
        "lr_search": {"method": "grid", "grid": [1e-3, 3e-3, 1e-2]},
        "seeds": [0],
        "execution": {"threads": 1},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    done = cli_process(
        "study",
        path,
        "--storage",
        f"sqlite:///{tmp_path / 'optuna.db'}",
        "--tracking-uri",
        uri,
        "--workdir",
        tmp_path / "studies",
        "--no-report",
        cwd=tmp_path,
        cache=isolated_cache,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("cudaprofile").experiment_id])
    trials = [r for r in runs if r.data.tags.get("cem_ablate.status") == "finished"]
    assert len(trials) == 3, [(r.info.run_name, r.data.tags.get("cem_ablate.status")) for r in runs]
    for run in trials:  # each trial logged the profile it trained with
        params = run.data.params
        assert (
            params["device.precision"],
            params["device.optimizer_kernel"],
            params["device.compile"],
            params["device.loss_impl"],
        ) == ("bf16-mixed", "fused", "True", "chunked")
        assert math.isfinite(run.data.metrics["test_ppl"])
