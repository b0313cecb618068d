"""Checkpoints that are resumed only when they are exactly what the run wrote.

    <run_dir>/checkpoints/last.ckpt       the newest step-boundary checkpoint
    <run_dir>/checkpoints/previous.ckpt   the one before it: the fallback
    <run_dir>/checkpoints/digests.json    {"sha256": [newest, previous], "step": [newest, previous]}:
                                          what was written, and at which optimizer step

A file that unpickles is not necessarily the file the run wrote: after a kill a torn or
altered checkpoint resumed silently and its garbage weights became the trial's result.
So every checkpoint's SHA-256 is recorded when it is written, and resuming takes the
newest of `last.ckpt`, `previous.ckpt` whose digest is recorded; a file that is
missing from the record, unreadable or altered is refused with one `warning:` line
naming it, and with neither the run starts fresh (the same result: training is a
function of the config, `data.sampler`).

Writing (rank 0; the save itself is collective): save under a name private to this
process -> digest it -> the writer's lease is checked (`training.lease`) -> record the
new digest with the current newest one (an atomic rename of digests.json) ->
`last.ckpt` becomes `previous.ckpt` -> the new file becomes `last.ckpt`. A kill
between any two steps leaves each checkpoint either recorded with its own digest or
refused, never a wrong file accepted; at most the newest step is lost.

Readers (generate, export, eval, serving) go through `for_reading`: the same digests,
but an altered file is an error (or, for a run folder, the verified one before it with
a warning line), never weights silently read from a torn file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cem_ablate.config.errors import ConfigError

if TYPE_CHECKING:
    import lightning as L

LAST, PREVIOUS, DIGESTS = "last.ckpt", "previous.ckpt", "digests.json"
_CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class CheckpointFiles:
    """The checkpoints of one run folder: write with a digest, resume only verified."""

    def __init__(self, folder: Path, may_write: Callable[[], None] = lambda: None):
        self.folder = Path(folder)
        self.may_write = may_write  # raises (training.lease.LeaseLost) when this process must not write
        self.saved_step: int | None = None  # the step this object saved last (None: none yet)

    @property
    def last(self) -> Path:
        return self.folder / LAST

    @property
    def previous(self) -> Path:
        return self.folder / PREVIOUS

    @property
    def digests_file(self) -> Path:
        return self.folder / DIGESTS

    def recorded(self) -> list[str]:
        """The digests of the checkpoints written here, newest first ([] if none or unreadable)."""
        try:
            digests = json.loads(self.digests_file.read_text())["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            return []
        return [d for d in digests if isinstance(d, str)] if isinstance(digests, list) else []

    def newest_step(self) -> int | None:
        """The optimizer step of the newest checkpoint, as recorded with its digest (None:
        none, or written before steps were recorded)."""
        try:
            step = json.loads(self.digests_file.read_text())["step"][0]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None
        return step if isinstance(step, int) else None

    def save(self, trainer: L.Trainer) -> None:
        """Write the trainer's state as the newest checkpoint (collective: every rank calls it)."""
        tmp = self.folder / f"{LAST}.{os.getpid()}.tmp"  # private: a stale writer never shares it
        trainer.save_checkpoint(tmp, weights_only=False)
        if trainer.is_global_zero:
            try:
                self.install(tmp, trainer.global_step)
            finally:
                tmp.unlink(missing_ok=True)
        trainer.strategy.barrier("checkpoint-rename")
        self.saved_step = trainer.global_step

    def install(self, tmp: Path, step: int | None = None) -> None:
        """Make the file `tmp` (written by this process) the newest checkpoint, its digest
        (and the step it holds) recorded."""
        digest = file_digest(tmp)
        self.may_write()
        known = self.recorded()
        newest = known[:1] if self.last.exists() else []
        record = self.folder / f"{DIGESTS}.{os.getpid()}.tmp"
        steps = [step, self.newest_step()][: len(newest) + 1]
        record.write_text(json.dumps({"sha256": [digest, *newest], "step": steps}))
        os.replace(record, self.digests_file)
        if self.last.exists():
            os.replace(self.last, self.previous)
        os.replace(tmp, self.last)

    def verified(self, warn: bool = True) -> Path | None:
        """The newest checkpoint whose digest is recorded; None: start fresh. One
        `warning:` line names every checkpoint refused."""
        known = set(self.recorded())
        refused = []
        chosen = None
        for path in (self.last, self.previous):
            if not path.exists():
                continue
            try:
                ok = file_digest(path) in known
            except OSError:
                ok = False
            if ok:
                chosen = path
                break
            refused.append(path)
        if refused and warn:
            why = "no recorded digest" if not known else "does not match its recorded digest"
            files = " and ".join(str(p) for p in refused)
            then = f"resuming from {chosen}" if chosen else "starting the run fresh"
            print(f"warning: checkpoint {files}: unreadable or altered ({why}); {then}", file=sys.stderr, flush=True)
        return chosen

    def for_reading(self, requested: Path | None = None) -> tuple[Path, str | None]:
        """The checkpoint a reader loads (`requested`, else the newest verified one) and
        a warning (without its `warning: ` prefix) or None. A run folder written before checkpoints had digests
        (no digests.json) is read unverified, with a warning."""
        known = self.recorded()
        run = self.folder.parent
        if requested is not None:
            if not known:
                return requested, (
                    f"{requested} is read unverified: its run folder records no "
                    f"checkpoint digests ({self.digests_file} is missing)"
                )
            if file_digest(requested) in known:
                return requested, None
            raise ConfigError(
                "CHECKPOINT",
                f"{requested} does not match the digests recorded in "
                f"{self.digests_file}: it was altered or truncated after it was written; "
                f"read {run} (its newest verified checkpoint) instead",
            )
        if not self.last.is_file() and not self.previous.is_file():
            raise ConfigError(
                "RUN_DIR",
                f"{run} has no checkpoint ({self.last}): is it the run folder of a "
                "finished `cem-ablate train` or study trial?",
            )
        if not known:
            newest = self.last if self.last.is_file() else self.previous
            return newest, (
                f"{newest} is read unverified: its run folder records no checkpoint "
                f"digests ({self.digests_file} is missing)"
            )
        chosen = self.verified(warn=False)
        if chosen is None:
            raise ConfigError(
                "RUN_DIR",
                f"no checkpoint in {self.folder} matches its recorded digest (altered or "
                "truncated after it was written): rerun the trial (or `cem-ablate "
                "train`) to write it again",
            )
        if chosen != self.last:
            return chosen, (
                f"checkpoint {self.last} does not match its recorded digest (altered or "
                f"truncated); reading {chosen}, the one written before it"
            )
        return chosen, None
