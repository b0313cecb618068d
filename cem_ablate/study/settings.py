"""Where a study runs: its stores, its folders, how its workers train (`StudySettings`).

Held by every session and pickled into the worker payload (`study.worker`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cem_ablate.study.storage import StorageSettings


@dataclass(frozen=True)
class StudySettings:
    storage: StorageSettings
    tracking_uri: str
    workdir: Path  # run folders (checkpoints) and worker logs, under <workdir>/<study name>/
    threads: int | None = None  # torch threads per worker process (None: the config's)
    progress: bool = True  # the engine's per-step progress bar
    reuse: bool = True  # record finished trials of other studies with the same trial key (study.reuse)
