"""train_run end to end on tiny configs: learning, MLflow, exact resume, divergence, tasks."""

import json
import math

import pytest
from mlflow import MlflowClient

from cem_ablate.config import ConfigError
from cem_ablate.training.config import parse_run_config
from cem_ablate.training.engine import resolve_run, train_run
from tests.training.helpers import UNIFORM_BYTE_PPL, CrashAt, RecordLosses, tiny_run


def test_tiny_run_learns_and_logs_to_mlflow(tmp_path, tracking_uri):
    losses = RecordLosses()
    cfg = parse_run_config(tiny_run(name="learns", max_steps=60))
    result = train_run(
        cfg, run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False, extra_callbacks=[losses]
    )
    assert result.status == "finished" and result.error is None and result.steps == 60
    assert result.test_ppl < UNIFORM_BYTE_PPL / 5 and result.val_ppl < UNIFORM_BYTE_PPL / 5
    assert math.isclose(result.test_loss, math.log(result.test_ppl), rel_tol=1e-5)
    assert sum(list(losses.losses.values())[-10:]) < sum(list(losses.losses.values())[:10])
    assert result.tokens_seen == 60 * 8 * 64 and result.tokens_per_sec > 0 and 0 < result.mfu < 1
    assert result.params == resolve_run(cfg).report.params_total

    client = MlflowClient(tracking_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED" and run.data.tags["cem_ablate.status"] == "finished"
    assert run.data.params["model.size"] == "tiny" and run.data.params["train.lr"] == "0.003"
    assert run.data.params["data.corpus_fingerprint"].startswith("stdlib-")
    for key in ("train_loss", "val_loss", "val_ppl", "test_ppl", "test_loss", "lr", "tokens_per_sec", "mfu"):
        assert key in run.data.metrics, key
    val_steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")]
    # once per validation, no duplicates (Lightning logs the 0-based index of the last step)
    assert val_steps == [19, 39, 59]
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["status"] == "finished" and saved["test_ppl"] == pytest.approx(result.test_ppl)


def test_resume_after_a_crash_reproduces_the_uninterrupted_run(tmp_path, tracking_uri):
    # 24 steps, checkpoints every 8: the crash at 10 resumes from 8, with 16 steps left
    # (a loader as short as the remaining steps once replayed batches 9-16 here).
    cfg = parse_run_config(tiny_run(name="resume", max_steps=24, ckpt_every_n_steps=8, val_every_n_steps=12))
    straight = RecordLosses()
    full = train_run(
        cfg, run_dir=tmp_path / "straight", tracking_uri=tracking_uri, progress=False, extra_callbacks=[straight]
    )

    crashed = train_run(
        cfg, run_dir=tmp_path / "resumed", tracking_uri=tracking_uri, progress=False, extra_callbacks=[CrashAt(step=10)]
    )
    assert crashed.status == "failed" and "simulated crash" in crashed.error
    resumed_losses = RecordLosses()
    resumed = train_run(
        cfg, run_dir=tmp_path / "resumed", tracking_uri=tracking_uri, progress=False, extra_callbacks=[resumed_losses]
    )

    assert resumed.status == "finished" and min(resumed_losses.losses) == 9 and max(resumed_losses.losses) == 24
    for step, loss in resumed_losses.losses.items():
        assert loss == pytest.approx(straight.losses[step], abs=1e-6), step
    assert resumed.test_loss == pytest.approx(full.test_loss, abs=1e-6)
    assert resumed.val_loss == pytest.approx(full.val_loss, abs=1e-6)
    assert resumed.mlflow_run_id == crashed.mlflow_run_id  # the same MLflow run continues
    # an ended run is not trained again, and its folder is not reused by another config
    assert train_run(cfg, run_dir=tmp_path / "resumed", tracking_uri=tracking_uri).test_loss == resumed.test_loss
    with pytest.raises(ConfigError, match="different config"):
        train_run(
            parse_run_config(tiny_run(name="resume", lr=1e-3)), run_dir=tmp_path / "resumed", tracking_uri=tracking_uri
        )


def test_huge_learning_rate_ends_as_diverged(tmp_path, tracking_uri):
    cfg = parse_run_config(tiny_run(name="diverge", lr=1e4, warmup_frac=0.0, max_steps=30))
    result = train_run(cfg, run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False)
    assert result.status == "diverged" and result.diverged_step is not None and result.diverged_step < 30
    assert result.steps == result.diverged_step and math.isfinite(result.train_loss)
    assert math.isnan(result.test_ppl) and "non-finite" in result.error
    run = MlflowClient(tracking_uri).get_run(result.mlflow_run_id)
    assert run.data.tags["cem_ablate.status"] == "diverged" and run.info.status == "FINISHED"
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "diverged"


def test_mqar_with_cem_layers_reports_recall_and_energies(tmp_path, tracking_uri):
    cfg = tiny_run(name="mqar", max_steps=20, val_every_n_steps=10, test_batches=None)
    cfg["model"] = {"size": "tiny", "attention": {"name": "cem", "steps": 2}, "mlp": {"name": "cem", "steps": 2}}
    cfg["data"] = {
        "task": "mqar",
        "block_size": 32,
        "mqar": {"vocab_size": 64, "num_kv_pairs": 4, "n_train": 400, "n_val": 40, "n_test": 40},
    }
    result = train_run(parse_run_config(cfg), run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False)
    assert result.status == "finished" and 0.0 <= result.recall_accuracy <= 1.0
    assert result.objective == pytest.approx(1 - result.recall_accuracy)
    metrics = MlflowClient(tracking_uri).get_run(result.mlflow_run_id).data.metrics
    # energy before and after each of the T=2 recursion steps of every CEM sublayer
    for sublayer in ("blocks.0.attention", "blocks.1.mlp"):
        assert {f"energy/{sublayer}/step{t}" for t in range(3)} <= set(metrics)
    assert "test_recall_acc" in metrics


def test_gp_regression_with_recursive_cem_mlps(tmp_path, tracking_uri):
    cfg = parse_run_config(
        {
            "name": "gp",
            "model": {"d_model": 32, "n_layers": 2, "n_heads": 1, "d_mlp": 64, "mlp": {"name": "cem", "steps": 2}},
            "train": {"lr": 3e-3, "batch_size": 32, "max_steps": 60, "val_every_n_steps": 30, "log_every_n_steps": 10},
            "data": {"task": "gp", "gp": {"n_train": 512, "n_val": 64, "n_test": 128}},
        }
    )
    result = train_run(cfg, run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False)
    assert result.status == "finished" and 0 < result.rmse < 1.0  # the prior std is ~0.88
    assert result.objective == result.rmse and math.isnan(result.test_ppl)
    report = resolve_run(cfg).report
    assert report.params_by_component["mlp"] == 2 * 2 * 32 * 64  # two tied D x D_m matrices per layer


@pytest.mark.slow
@pytest.mark.soak  # in CI train.compile through every family (aot_eager): tests/training/test_device_profile.py
def test_compile_path_trains_on_cpu(tmp_path, tracking_uri):
    cfg = parse_run_config(tiny_run(name="compiled", compile=True, max_steps=2, val_batches=1, test_batches=1))
    result = train_run(cfg, run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False)
    assert result.status == "finished" and math.isfinite(result.test_loss)


@pytest.mark.slow
@pytest.mark.soak
def test_ddp_called_as_a_library_runs_in_a_subprocess(tmp_path, tracking_uri):
    """The study runner's path: devices > 1 from a script that must not be re-executed."""
    cfg = parse_run_config(tiny_run(name="ddp-library", max_steps=6, val_every_n_steps=6, devices=2))
    result = train_run(cfg, run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False)
    assert result.status == "finished" and result.steps == 6 and result.tokens_seen == 6 * 16 * 64
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("ddp-library").experiment_id])
    assert [r.info.run_id for r in runs] == [result.mlflow_run_id]


def test_mfu_counts_the_backward_pass_that_truncated_backprop_runs(tmp_path, tracking_uri):
    # CEM attention T = 4 differentiating only its last step (docs/design/layers.md#s2-cem-attention): its training
    # FLOPs are well below 3 x forward, and MFU must use the model report's count.
    from cem_ablate.training.hardware import device_peak_flops

    cfg = tiny_run(name="mfu-truncated", max_steps=4, val_every_n_steps=4, val_batches=1, test_batches=1)
    cfg["model"]["attention"] = {"name": "cem", "steps": 4, "backprop_steps": 1}
    cfg = parse_run_config(cfg)
    report = resolve_run(cfg).report
    assert report.train_flops_per_token < 0.9 * 3 * report.flops_per_token
    result = train_run(cfg, run_dir=tmp_path / "run", tracking_uri=tracking_uri, progress=False)
    assert result.status == "finished"
    expected = report.train_flops_per_token * result.tokens_per_sec / device_peak_flops("cpu", "32-true")
    assert result.mfu == pytest.approx(expected, rel=1e-9)
