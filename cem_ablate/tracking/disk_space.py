"""A full disk, recognised under whatever wraps it, and said in one line.

A full disk reaches the study as an `OSError(ENOSPC)` from a checkpoint or result file,
a `RuntimeError` from torch's zip writer ("file write failed"), SQLite's "database or
disk is full" wrapped by SQLAlchemy and then by Optuna (whose message blames a value
"exceeding max length") or by MLflow. None of these is the trial's fault: the study
stops (the trial is requeued, not failed) and says which disk to free.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FULL_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded")
NEARLY_FULL_BYTES = 1 << 20  # a write that failed without saying why, on a disk with less free than this


def _chain(err: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _free_bytes(path: Path) -> int | None:
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def out_of_space(err: BaseException, places: Iterable[Path] = ()) -> bool:
    """Whether `err` (or what it wraps) is a write that failed for want of disk space."""
    for e in _chain(err):
        if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
            return True
        text = str(e).lower()
        if any(t in text for t in FULL_TEXTS):
            return True
        if "file write failed" in text and any((_free_bytes(p) or 0) < NEARLY_FULL_BYTES for p in places):
            return True  # torch's checkpoint writer does not pass the errno on
    return False


def out_of_space_message(err: BaseException, places: Iterable[Path]) -> str:
    """One line: the file (or else the folder) on the disk with the least space left,
    how much that is, and what to do."""
    named = [
        Path(name)
        for e in _chain(err)
        if isinstance(e, OSError)
        for name in (getattr(e, "filename2", None), e.filename)
        if name
    ]  # shutil.move: src -> dst
    candidates = [
        (p, named_first) for named_first, group in ((0, named), (1, [Path(p) for p in places])) for p in group
    ]
    measured = [(free, order, p) for p, order in candidates if (free := _free_bytes(p)) is not None]
    if measured:
        free, _, path = min(measured, key=lambda m: (m[0], m[1]))
        where = f"{path} ({_size(free)} free on its disk)"
    else:
        where = ", ".join(str(p) for p, _ in candidates) or os.getcwd()
    return (
        f"disk full writing {where}: free space there and rerun the same command "
        "(finished trials are kept; the interrupted trial is queued again)"
    )


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
