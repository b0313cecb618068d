"""Checkpoint integrity (issue 28): a checkpoint altered after a crash is never resumed.

A real run crashes between checkpoints (last.ckpt at step 10, previous.ckpt at 5); its
folder is copied and `last.ckpt` is truncated, overwritten with random bytes, or
rewritten by torch with perturbed weights (a file that loads fine). Each rerun must
refuse it with one `warning:` line naming the file, resume from the previous verified
checkpoint (or start fresh) and end with exactly the uninterrupted run's numbers (CPU).
"""

import shutil

import pytest
import torch

from cem_ablate.training.checkpoints import CheckpointFiles, file_digest
from cem_ablate.training.engine import train_run
from tests.training.helpers import CrashAt, RecordLosses, tiny_run

CFG = tiny_run(name="integrity", max_steps=20, ckpt_every_n_steps=5, val_every_n_steps=10)


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _random_bytes(path):
    path.write_bytes(torch.randint(0, 256, (path.stat().st_size,), generator=torch.Generator().manual_seed(0),
                                   dtype=torch.uint8).numpy().tobytes())


def _perturbed_weights(path):
    ckpt = torch.load(path, weights_only=False)
    name = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point())
    ckpt["state_dict"][name] = ckpt["state_dict"][name] + 1e-3
    torch.save(ckpt, path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tracking_uri):
    root = tmp_path_factory.mktemp("integrity")
    full = train_run(CFG, run_dir=root / "straight", tracking_uri=tracking_uri, progress=False)
    crashed = train_run(CFG, run_dir=root / "crashed", tracking_uri=tracking_uri, progress=False,
                        extra_callbacks=[CrashAt(step=12)])
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
