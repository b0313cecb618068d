"""Shared test setup: offline, quiet, deterministic."""

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_UPDATE_DOWNLOAD_COUNTS", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# --- Tests write only into their temporary folders ----------------------------------------
# The default MLflow/Optuna stores, run folders and reports are relative to the working
# directory (`tracking/store.py`, `study/storage.py`), and tests start the CLI with
# cwd = the repository: a test that forgets `--tracking-uri`/`tmp_path` writes into the
# user's own `mlruns/` (an `mfu-truncated` experiment appeared in `cem-ablate ui`). After
# every test the repository's output folders are compared with the session's start; a
# change fails that test's teardown, naming what changed.

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_FOLDERS = ("mlruns", "reports", "runs", "lightning_logs", "checkpoints")  # .gitignore'd outputs
CACHES = {
    "__pycache__",
    ".pytest_cache",
    ".import_linter_cache",
    ".hypothesis",
    ".cache",
    ".venv",
    ".git",
    ".mypy_cache",
    ".ruff_cache",
}


def repo_outputs(root: Path = ROOT, depth: int = 2) -> dict[str, tuple[int, int]]:
    """relative path -> (size, mtime_ns) of the output folders' entries `depth` levels
    deep (a new run, experiment or study folder, and every write to the SQLite stores
    `mlruns/*.db`, show there), and the names of the repository's top-level entries."""
    out = {p.name: (0, 0) for p in root.iterdir() if p.name not in CACHES and not p.name.endswith(".egg-info")}

    def walk(folder: Path, level: int) -> None:
        try:
            entries = list(folder.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            try:
                stat = entry.stat()
            except FileNotFoundError:  # removed while listed (an SQLite journal)
                continue
            out[str(entry.relative_to(root))] = (stat.st_size if entry.is_file() else 0, stat.st_mtime_ns)
            if level < depth and entry.is_dir():
                walk(entry, level + 1)

    for name in OUTPUT_FOLDERS:
        walk(root / name, 1)
    return out


def changed_outputs(before: dict, after: dict) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


@pytest.fixture(scope="session")
def _outputs_at_start():
    return {"snapshot": repo_outputs()}


@pytest.fixture(autouse=True)
def _writes_nothing_into_the_repository(_outputs_at_start):
    yield
    now = repo_outputs()
    changed = changed_outputs(_outputs_at_start["snapshot"], now)
    if changed:
        _outputs_at_start["snapshot"] = now  # blame the next offender only for its own writes
        pytest.fail(
            f"this test wrote into the repository ({ROOT}), not its tmp_path: {', '.join(changed[:8])}"
            + (f" and {len(changed) - 8} more" if len(changed) > 8 else ""),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _mlflow_retry_window_stays_in_its_test():
    """An in-process `cem-ablate study` sets MLflow's retry variables for itself and the
    processes it starts (tracking.store.set_mlflow_outage_window), and a value already set
    wins: left in this process's environment, one test's window would become every later
    subprocess's (a 10 s `--outage-wait` waiting 2 minutes per request)."""
    from cem_ablate.tracking.store import MLFLOW_BACKOFF_VAR, MLFLOW_RETRIES_VAR

    before = {name: os.environ.get(name) for name in (MLFLOW_RETRIES_VAR, MLFLOW_BACKOFF_VAR)}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
