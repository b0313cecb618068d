"""Checkpoint integrity: a checkpoint altered after a crash is never resumed.

A real run crashes between checkpoints (last.ckpt at step 10, previous.ckpt at 5); its
folder is copied and `last.ckpt` is truncated, overwritten with random bytes, or
rewritten by torch with perturbed weights (a file that loads fine). Each rerun must
refuse it with one `warning:` line naming the file, resume from the previous verified
checkpoint (or start fresh) and end with exactly the uninterrupted run's numbers (CPU).
"""

import json
import shutil

import pytest
import torch

from cem_ablate.training.checkpoints import CheckpointFiles, file_digest
from cem_ablate.training.config import parse_run_config
from cem_ablate.training.engine import train_run
from tests.training.helpers import CrashAt, RecordLosses, tiny_run

CFG = parse_run_config(tiny_run(name="integrity", max_steps=20, ckpt_every_n_steps=5, val_every_n_steps=10))


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _random_bytes(path):
    path.write_bytes(
        torch.randint(0, 256, (path.stat().st_size,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
        .numpy()
        .tobytes()
    )


def _perturbed_weights(path):
    ckpt = torch.load(path, weights_only=False)
    name = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point())
    ckpt["state_dict"][name] = ckpt["state_dict"][name] + 1e-3
    torch.save(ckpt, path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tracking_uri):
    root = tmp_path_factory.mktemp("integrity")
    full = train_run(CFG, run_dir=root / "straight", tracking_uri=tracking_uri, progress=False)
    crashed = train_run(
        CFG, run_dir=root / "crashed", tracking_uri=tracking_uri, progress=False, extra_callbacks=[CrashAt(step=12)]
    )
    assert full.status == "finished" and crashed.status == "failed"
    return root, full


def _rerun(root, name, alter, tracking_uri, capfd):
    folder = root / name
    shutil.copytree(root / "crashed", folder)
    (folder / "mlflow.json").unlink()  # its own MLflow run, not the crashed one's
    checkpoints = CheckpointFiles(folder / "checkpoints")
    assert checkpoints.verified(warn=False) == checkpoints.last  # untouched, the newest one resumes
    alter(checkpoints)
    capfd.readouterr()
    losses = RecordLosses()
    result = train_run(CFG, run_dir=folder, tracking_uri=tracking_uri, progress=False, extra_callbacks=[losses])
    warnings = [line for line in capfd.readouterr().err.splitlines() if line.startswith("warning:")]
    return result, losses, warnings, checkpoints


@pytest.mark.parametrize("damage", [_truncate, _random_bytes, _perturbed_weights])
def test_an_altered_last_checkpoint_falls_back_to_the_previous_one(runs, damage, tracking_uri, capfd):
    root, full = runs

    def alter(checkpoints):
        damage(checkpoints.last)

    result, losses, warnings, checkpoints = _rerun(root, damage.__name__, alter, tracking_uri, capfd)
    assert len(warnings) == 1 and str(checkpoints.last) in warnings[0] and "resuming from" in warnings[0], warnings
    assert min(losses.losses) == 6  # resumed from previous.ckpt (step 5), not from the damaged step 10
    assert result.status == "finished"
    assert (result.test_loss, result.val_loss, result.test_ppl) == (full.test_loss, full.val_loss, full.test_ppl)
    assert checkpoints.verified(warn=False) == checkpoints.last  # the finished run's own checkpoint


def test_with_no_good_checkpoint_the_run_starts_fresh(runs, tracking_uri, capfd):
    root, full = runs

    def alter(checkpoints):
        _perturbed_weights(checkpoints.last)
        _truncate(checkpoints.previous)

    result, losses, warnings, checkpoints = _rerun(root, "both", alter, tracking_uri, capfd)
    assert len(warnings) == 1 and "starting the run fresh" in warnings[0], warnings
    assert str(checkpoints.last) in warnings[0] and str(checkpoints.previous) in warnings[0]
    assert min(losses.losses) == 1 and result.status == "finished"
    assert (result.test_loss, result.val_loss, result.test_ppl) == (full.test_loss, full.val_loss, full.test_ppl)


def test_a_checkpoint_without_a_recorded_digest_is_not_resumed(runs, tracking_uri, capfd):
    """A folder from before digests were recorded: its checkpoint is unverified."""
    root, full = runs

    def alter(checkpoints):
        checkpoints.digests_file.unlink()

    result, losses, warnings, checkpoints = _rerun(root, "undigested", alter, tracking_uri, capfd)
    assert len(warnings) == 1 and "no recorded digest" in warnings[0] and "starting the run fresh" in warnings[0]
    assert min(losses.losses) == 1
    assert (result.test_loss, result.val_loss) == (full.test_loss, full.val_loss)


def test_digests_record_the_two_newest_checkpoints(runs):
    root, _ = runs
    checkpoints = CheckpointFiles(root / "crashed" / "checkpoints")
    assert checkpoints.recorded() == [file_digest(checkpoints.last), file_digest(checkpoints.previous)]
    assert torch.load(checkpoints.last, weights_only=False)["global_step"] == 10
    assert torch.load(checkpoints.previous, weights_only=False)["global_step"] == 5
    assert not list(checkpoints.folder.glob("*.tmp"))  # no temporary file left behind


@pytest.mark.slow
@pytest.mark.soak
def test_kill_9_then_a_rewritten_checkpoint_is_refused_by_the_rerun(tmp_path, isolated_cache):
    """`cem-ablate train` killed with SIGKILL after its second checkpoint; last.ckpt is then
    rewritten by torch with perturbed weights (it loads fine). The rerun (the same command)
    names it in one warning line and ends exactly where the uninterrupted run does."""
    from tests.cli.test_train_command import cli, kill_9_once_written, write_config

    config = write_config(tmp_path / "run.yaml", max_steps=30, ckpt_every_n_steps=5, val_every_n_steps=15)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = kill_9_once_written(config, uri, tmp_path, isolated_cache, "previous.ckpt")
    last = run_dir / "checkpoints" / "last.ckpt"
    _perturbed_weights(last)

    rerun = cli(config, "--tracking-uri", uri, cwd=tmp_path, env_cache=isolated_cache)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    warnings = [line for line in rerun.stderr.splitlines() if line.startswith("warning:")]
    # the file as the command names it (its run folder is relative to the working directory)
    assert len(warnings) == 1 and str(last.relative_to(tmp_path)) in warnings[0], rerun.stderr[-3000:]
    resumed = json.loads((run_dir / "result.json").read_text())
    # the uninterrupted run, by the same command (same process settings, so same float order)
    done = cli(
        config, "--tracking-uri", uri, "--run-dir", tmp_path / "straight", cwd=tmp_path, env_cache=isolated_cache
    )
    assert done.returncode == 0, done.stderr[-3000:]
    straight = json.loads((tmp_path / "straight" / "result.json").read_text())
    assert resumed["status"] == "finished" and resumed["steps"] == 30
    assert (resumed["test_loss"], resumed["val_loss"]) == (straight["test_loss"], straight["val_loss"])
