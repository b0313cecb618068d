"""Running out of device memory is an outcome with its numbers (training/out_of_memory.py).

No GPU here: the error is injected as torch raises it on CUDA (`torch.OutOfMemoryError`
with CUDA's message), from inside a real training step."""

from __future__ import annotations

import lightning as L
import torch
from mlflow import MlflowClient

from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.training.config import parse_run_config
from cem_ablate.training.engine import train_run
from cem_ablate.training.out_of_memory import OUT_OF_MEMORY, out_of_memory_reason
from tests.training.helpers import tiny_run

CUDA_MESSAGE = (
    "CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
    "512.00 MiB is free. Including non-PyTorch memory, this process has 78.6 GiB memory in use."
)


class OutOfMemoryAt(L.Callback):
    """Raise CUDA's out-of-memory error in the forward of optimizer step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise torch.OutOfMemoryError(CUDA_MESSAGE)


def test_the_reason_says_what_the_step_asked_for_and_what_the_device_holds():
    reason = out_of_memory_reason(torch.OutOfMemoryError(CUDA_MESSAGE), "cpu")
    assert reason.startswith(f"{OUT_OF_MEMORY}: the step asked for 1.50 GiB more;")
    assert "79.19 GiB" in reason  # torch's own line keeps the device's numbers
    assert out_of_memory_reason(torch.OutOfMemoryError("out of memory"), "cpu").startswith(
        f"{OUT_OF_MEMORY}: the step's request is unknown;"
    )


def test_a_run_out_of_memory_ends_failed_with_its_numbers_and_the_next_run_trains(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = parse_run_config(tiny_run(name="oom", max_steps=4, val_every_n_steps=4, val_batches=1, test_batches=1))
    result = train_run(
        cfg, run_dir=tmp_path / "oom", tracking_uri=uri, progress=False, extra_callbacks=[OutOfMemoryAt(2)]
    )
    assert result.status == TrialStatus.FAILED and result.steps == 2
    assert result.error.startswith(f"{OUT_OF_MEMORY}: the step asked for 1.50 GiB more;"), result.error
    run = MlflowClient(uri).get_run(result.mlflow_run_id)
    assert run.info.status == "FAILED" and OUT_OF_MEMORY in str(run.data.tags)
    after = train_run(
        parse_run_config(tiny_run(name="after", max_steps=2, val_every_n_steps=2, val_batches=1, test_batches=1)),
        run_dir=tmp_path / "after",
        tracking_uri=uri,
        progress=False,
    )
    assert after.status == TrialStatus.FINISHED  # the process goes on to its next run
