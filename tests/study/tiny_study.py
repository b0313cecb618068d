"""A study file small enough to train in seconds per trial on CPU (real engine)."""

import os
import shutil
from pathlib import Path

import yaml

CORPUS_FILES = 60

TINY_BASE = {
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_mlp": 64, "max_seq_len": 32},
    "train": {
        "batch_size": 4,
        "max_steps": 4,
        "val_every_n_steps": 2,
        "val_batches": 1,
        "test_batches": 1,
        "ckpt_every_n_steps": 2,
        "warmup_frac": 0.0,
        "log_every_n_steps": 2,
    },
    "data": {"source": "stdlib", "tokenizer": "byte", "block_size": 32},
}


def own_cache(folder: Path) -> str:
    """A cache folder for one test's processes (their token caches apart from the session's),
    holding the CPU peak the session already measured (training.hardware measures it once per
    cache folder: 3 s of busy cores, which every such test would otherwise spend again)."""
    from cem_ablate.data.config import cache_root

    cache = Path(folder) / "cache"
    measured = cache_root() / "hardware" / "cpu-peak.json"  # the session's cache (tests/data/conftest)
    mine = cache / "hardware" / "cpu-peak.json"
    if measured.exists() and not mine.exists():
        mine.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(measured, mine)
    return str(cache)


def make_corpus(folder: Path) -> Path:
    """A few stdlib modules as .txt files: a real local dataset that opens in a blink
    (the `stdlib` source scans 50k files per run)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sources = sorted(Path(os.__file__).parent.glob("*.py"))[:CORPUS_FILES]
    for src in sources:
        (folder / f"{src.stem}.txt").write_text(src.read_text(encoding="utf-8", errors="replace"))
    return folder


def write_study(
    folder: Path, name: str = "tiny", grid=(1e-3, 4e-3), max_steps: int = 4, corpus: Path | None = None, **extra
) -> Path:
    """llama vs CEM attention (paired with its Llama baseline) over `grid`."""
    mapping = {
        "name": name,
        "base": {k: dict(v) for k, v in TINY_BASE.items()},
        "variants": [{"name": "llama"}, {"name": "cem_attention", "set": {"model.attention": "cem"}}],
        "baselines": {"llama": {"model.attention": "llama"}},
        # one rate: a comparison at that rate, said so (a one-rate grid alone is refused)
        "lr_search": {"method": "grid", "grid": list(grid), **({"fixed": True} if len(grid) == 1 else {})},
        "seeds": [0],
        "execution": {"threads": 1},  # tiny models: one thread is faster, and steady under load
    }
    mapping["base"]["train"]["max_steps"] = max_steps
    if corpus is not None:
        mapping["base"]["data"]["source"] = str(corpus)
    mapping.update(extra)
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return path


def prepared_session(tmp_path: Path, path: Path):
    """An in-process study session over `path` (SQLite Optuna and MLflow stores under
    `tmp_path`, one thread), prepared; with its tracking URI. For tests that drive
    `run_trial` themselves."""
    from cem_ablate.cli.study_command import load_expanded
    from cem_ablate.study.session import StudySession, StudySettings
    from cem_ablate.study.storage import StorageSettings

    tracking = f"sqlite:///{Path(tmp_path) / 'mlflow.db'}"
    settings = StudySettings(
        StorageSettings(f"sqlite:///{Path(tmp_path) / 'optuna.db'}", 10, 60),
        tracking,
        Path(tmp_path) / "work",
        threads=1,
        progress=False,
    )
    session = StudySession(load_expanded(str(path), None, []), settings)
    session.prepare(echo=lambda *_: None)
    return session, tracking
