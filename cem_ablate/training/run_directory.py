"""The folder of one run: its config, checkpoints, MLflow run id and result.

    <run_dir>/config.yaml          the resolved run config (what `train` re-reads)
    <run_dir>/trial_key            `RunConfig.trial_key()` of the run it holds
    <run_dir>/checkpoints/         last.ckpt, previous.ckpt and their digests (training.checkpoints)
    <run_dir>/lease                the claim that holds the folder now, for a study trial (training.lease)
    <run_dir>/mlflow.json          tracking URI + run id, so a resumed run continues it
    <run_dir>/result.json          TrainResult, written when the run ends

Only global rank 0 writes here. The CLI derives the folder from the config's trial
key (`runs/<name>-<trial key>`, `RunConfig.trial_key`), so "kill -9 and rerun the same
command" finds it; a folder counts as holding a config when the trial keys match
(execution settings such as threads may differ between attempts).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from cem_ablate.config import ConfigError
from cem_ablate.config.trial_status import SETTLED
from cem_ablate.training.checkpoints import CheckpointFiles
from cem_ablate.training.config import RunConfig
from cem_ablate.training.lease import Lease, LeaseLost
from cem_ablate.training.result import TrainResult


def default_run_dir(cfg: RunConfig, root: str | Path = "runs") -> Path:
    slug = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in cfg.name)
    return Path(root) / f"{slug}-{cfg.trial_key()}"


def is_rank_zero_process() -> bool:
    """Whether this process is (or will become) global rank 0 (see training.rank)."""
    from cem_ablate.training.rank import is_global_rank_zero

    return is_global_rank_zero()


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # private: two attempts never share it
    tmp.write_text(text)
    os.replace(tmp, path)


class RunDirectory:
    def __init__(self, path: str | Path, lease: Lease | None = None):
        self.path = Path(path)
        self.lease = lease  # None: this process may always write here (`cem-ablate train`)

    def may_write(self) -> None:
        """Raise `LeaseLost` when another attempt holds the folder or our claim is dead;
        called before every write of the run (files and MLflow)."""
        if self.lease is not None:
            self.lease.check(self.lease_file)

    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def checkpoints(self) -> CheckpointFiles:
        return CheckpointFiles(self.checkpoint_dir, self.may_write)

    @property
    def lease_file(self) -> Path:
        return self.path / "lease"

    @property
    def result_file(self) -> Path:
        return self.path / "result.json"

    @property
    def tracking_file(self) -> Path:
        return self.path / "mlflow.json"

    @property
    def trial_key_file(self) -> Path:
        return self.path / "trial_key"

    def holds(self, cfg: RunConfig) -> bool | None:
        """Whether the folder holds a run of `cfg`'s trial key (None: nothing saved yet)."""
        if not self.trial_key_file.exists():
            return None
        return self.trial_key_file.read_text().strip() == cfg.trial_key()

    def claim(self, cfg: RunConfig, resume: bool) -> None:
        """Make the folder hold `cfg`: refuse another config's run, clear it when not resuming.
        With a lease, take the folder over for it (only while its claim is live)."""
        if self.lease is not None:
            if not self.lease.is_live():
                raise LeaseLost(f"the claim {self.lease.token} is no longer live")
            self.path.mkdir(parents=True, exist_ok=True)
            write_atomically(self.lease_file, self.lease.token + "\n")
        if resume and self.holds(cfg) is False:
            raise ConfigError(
                "", f"{self.path} holds a run of a different config; pass another run directory or start fresh."
            )
        if not resume:
            for stale in (self.checkpoint_dir, self.result_file, self.tracking_file):
                if stale.is_dir():
                    shutil.rmtree(stale)
                elif stale.exists():
                    stale.unlink()
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self.config_file, yaml.safe_dump(cfg.to_mapping(), sort_keys=False))
        write_atomically(self.trial_key_file, cfg.trial_key() + "\n")

    def resume_checkpoint(self, warn: bool = True) -> Path | None:
        """The newest checkpoint whose recorded digest matches (None: start fresh)."""
        return self.checkpoints.verified(warn)

    def finished_result(self, cfg: RunConfig) -> TrainResult | None:
        """The result of this config's ended run (finished or diverged: rerunning it
        would not change it)."""
        result = self.read_result() if self.holds(cfg) else None
        return result if result is not None and result.status in SETTLED else None

    def write_result(self, result: TrainResult) -> None:
        self.may_write()
        write_atomically(self.result_file, json.dumps(result.to_dict(), indent=2))

    def read_result(self) -> TrainResult | None:
        if not self.result_file.exists():
            return None
        return TrainResult.from_dict(json.loads(self.result_file.read_text()))

    def tracked_run(self, tracking_uri: str) -> str | None:
        """The MLflow run this folder logged to before, if on the same store."""
        if not self.tracking_file.exists():
            return None
        data: dict[str, Any] = json.loads(self.tracking_file.read_text())
        return data.get("run_id") if data.get("tracking_uri") == tracking_uri else None

    def remember_run(self, tracking_uri: str, run_id: str) -> None:
        self.may_write()
        write_atomically(self.tracking_file, json.dumps({"tracking_uri": tracking_uri, "run_id": run_id}))


def locate_trained(target: str | Path) -> tuple[RunDirectory, Path, str | None]:
    """(run folder, the checkpoint to read, a warning or None) of RUN_DIR or of a
    checkpoint file inside one (`<run_dir>/checkpoints/*.ckpt`); the checkpoint is
    verified against the digests training recorded (`CheckpointFiles.for_reading`).
    What readers of a trained run (generate, export, eval) share; ConfigError otherwise."""
    path = Path(target)
    if path.is_dir():
        folder, requested = RunDirectory(path), None
    elif path.is_file():
        folder, requested = RunDirectory(path.parent.parent if path.parent.name == "checkpoints" else path.parent), path
    else:
        raise ConfigError("RUN_DIR", f"{path}: no such run folder or checkpoint file.")
    if not folder.config_file.is_file():
        raise ConfigError(
            "RUN_DIR",
            f"{folder.path} has no config.yaml beside its checkpoints; a checkpoint is "
            "read inside its run folder (<run_dir>/checkpoints/*.ckpt).",
        )
    checkpoint, warning = folder.checkpoints.for_reading(requested)
    return folder, checkpoint, warning
