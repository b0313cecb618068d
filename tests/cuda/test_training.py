"""Training on CUDA through the real engine, CLI and study runner.

- 30 bf16-mixed steps of every registered (attention, mlp) pair: finite, decreasing loss;
- `cem-ablate train` with `devices: 1` on the GPU, MLflow run written;
- a 2-step study trial end to end (Optuna queue -> worker process -> MLflow runs);
- NCCL: a one-rank process group all-reduces on the GPU (what DDP on GPUs starts);
- peak memory from `torch.cuda.max_memory_allocated`, as the bench reports it.

The runs train on the synthetic MQAR task (in memory): text sources read files
through Hugging Face `datasets`, which the GPU image lacks and which would need a
newer pyarrow carried along (scripts/gpu_env.sh); the data path is the same on CPU
and GPU and is tested on CPU.
"""

from __future__ import annotations

import json
import math
import socket

import pytest
import torch
import yaml

from cem_ablate import registry
from cem_ablate.training.config import parse_run_config
from tests.data.conftest import isolated_cache  # noqa: F401  (session-wide autouse fixture)
from tests.study.tiny_study import write_study
from tests.training.helpers import RecordLosses, cli_process, tiny_run

pytestmark = pytest.mark.cuda

STEPS = 30
CEM_OPTIONS = {  # recursion and the KQ diagonal on, so the GPU kernels (flex) and T > 1 train
    "attention": {"cem": {"steps": 2, "kq_diag": "shared"}},
    "mlp": {"cem": {"steps": 2}, "cem_param_matched": {"steps": 2}},
}


def sublayer(kind: str, name: str) -> dict:
    return {"name": name, **CEM_OPTIONS[kind].get(name, {})}


COMBINATIONS = [(a, m) for a in registry.names("attention") for m in registry.names("mlp")]


MQAR = {
    "task": "mqar",
    "block_size": 64,
    "mqar": {"vocab_size": 128, "num_kv_pairs": 8, "n_train": 2000, "n_val": 64, "n_test": 64},
}


def run_config(name: str, **train) -> dict:
    cfg = tiny_run(
        name=name,
        max_steps=STEPS,
        val_every_n_steps=STEPS,
        val_batches=2,
        test_batches=2,
        ckpt_every_n_steps=STEPS,
        log_every_n_steps=1,
        **train,
    )
    cfg["data"] = dict(MQAR)
    return cfg


@pytest.mark.parametrize("attention,mlp", COMBINATIONS)
def test_bf16_mixed_training_of_every_sublayer_pair(attention, mlp, tmp_path):
    from cem_ablate.training.engine import train_run

    cfg = run_config(f"cuda-{attention}-{mlp}")
    cfg["model"].update(attention=sublayer("attention", attention), mlp=sublayer("mlp", mlp))
    losses = RecordLosses()
    torch.cuda.reset_peak_memory_stats()
    result = train_run(
        parse_run_config(cfg),
        run_dir=tmp_path / "run",
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        progress=False,
        extra_callbacks=[losses],
    )
    peak = torch.cuda.max_memory_allocated()
    print(
        f"[{attention}+{mlp}] peak {peak / 2**20:.1f} MiB, loss {losses.losses[1]:.3f} -> "
        f"{losses.losses[STEPS]:.3f}, {result.tokens_per_sec:.0f} tokens/s, MFU {result.mfu:.2%}"
    )
    assert result.status == "finished", result.error
    values = [losses.losses[s] for s in sorted(losses.losses)]
    assert len(values) == STEPS and all(math.isfinite(v) for v in values)
    assert sum(values[-5:]) < 0.95 * sum(values[:5])  # learning: MQAR drops ~10% in 30 steps (CPU run)
    assert math.isfinite(result.test_loss) and result.tokens_per_sec > 0
    assert 0 < result.mfu < 1  # the GPU's peak came from the peak table
    assert peak > result.params * 4  # at least the fp32 weights lived on the GPU


def cli(*args, cwd, env_cache):
    return cli_process(*args, cwd=cwd, cache=env_cache, timeout=300)


def test_cem_ablate_train_on_one_gpu(tmp_path, isolated_cache):
    from mlflow import MlflowClient

    cfg = run_config("cuda-cli", devices=1)
    cfg["model"].update(attention=sublayer("attention", "cem"), mlp=sublayer("mlp", "cem"))
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = cli("train", path, "--tracking-uri", uri, "--no-progress", cwd=tmp_path, env_cache=isolated_cache)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(tmp_path.glob("runs/cuda-cli-*/result.json")).read_text())
    assert result["status"] == "finished" and result["steps"] == STEPS and 0 < result["mfu"] < 1
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("cuda-cli").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert "train_loss" in runs[0].data.metrics
    assert "GPU available: True (cuda), used: True" in done.stderr + done.stdout  # Lightning trained on the GPU


def test_two_step_study_trial_end_to_end(tmp_path, isolated_cache):
    from mlflow import MlflowClient

    path = write_study(tmp_path, name="cudastudy", grid=(2e-3,), max_steps=2)
    study = yaml.safe_load(path.read_text())
    study["base"]["data"] = dict(MQAR, block_size=32)
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    done = cli(
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
        env_cache=isolated_cache,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("cudastudy").experiment_id])
    trials = [r for r in runs if r.data.tags.get("cem_ablate.status") == "finished"]
    assert len(trials) == 2, [(r.info.run_name, r.data.tags) for r in runs]  # llama and cem_attention
    assert all(r.data.metrics["test_ppl"] > 1 for r in trials)
    results = [json.loads(p.read_text()) for p in (tmp_path / "studies").rglob("result.json")]
    assert len(results) == 2 and all(r["steps"] == 2 and 0 < r["mfu"] < 1 for r in results)


def test_nccl_process_group_on_one_gpu():
    import torch.distributed as dist

    assert dist.is_nccl_available()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, device_id=torch.device("cuda", 0)
    )
    try:
        x = torch.arange(4.0, device="cuda")
        dist.all_reduce(x)
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0] and dist.get_backend() == "nccl"
    finally:
        dist.destroy_process_group()


def test_bench_peak_memory_is_the_cuda_allocator_peak():
    from cem_ablate.bench.measure import step_peak_bytes

    batch = torch.zeros(4, device="cuda")
    mib = 2**20

    def step(b):
        big = torch.empty(64 * mib, dtype=torch.uint8, device="cuda")  # 64 MiB inside the step
        del big
        return 0.0

    peak = step_peak_bytes(step, batch)
    assert 64 * mib <= peak <= 64 * mib + 2 * mib


@pytest.mark.parametrize("attention", ["llama", "cem"])  # cem: ALiBi slopes now built on the device
def test_ordinary_training_steps_do_not_synchronize_the_gpu(attention, tmp_path):
    """Training = bench: CUDA's sync debug mode flags every synchronizing call;
    none may happen on an ordinary step (only on the first, warm-up step and on the
    logging, validation, checkpoint and last steps). The CPU twin of this test is
    tests/training/test_host_syncs.py. NOT YET RUN on a GPU (written without one)."""
    import traceback
    import warnings

    from cem_ablate.training.engine import train_run
    from tests.training.test_host_syncs import StepWindows

    windows = StepWindows()
    cfg = run_config(f"cuda-syncs-{attention}", log_every_n_steps=5)
    cfg["train"].update(max_steps=12, val_every_n_steps=12, ckpt_every_n_steps=12)
    cfg["model"]["attention"] = sublayer("attention", attention)
    flagged: dict[int, list[str]] = {}

    def record(message, category, filename, lineno, file=None, line=None):
        if windows.step is not None and "synchroniz" in str(message):
            frames = [f for f in traceback.extract_stack(limit=12)[:-1] if "warnings" not in f.filename][-4:]
            flagged.setdefault(windows.step, []).append(
                " < ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(frames))
            )

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = train_run(
                parse_run_config(cfg),
                run_dir=tmp_path / "run",
                tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                progress=False,
                extra_callbacks=[windows],
            )
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert result.status == "finished", result.error
    allowed = {1, 5, 10, 12}  # warm-up, logging every 5, validation + checkpoint + end at 12
    bad = {step: sorted(set(where))[:5] for step, where in flagged.items() if step not in allowed}
    assert not bad, bad
