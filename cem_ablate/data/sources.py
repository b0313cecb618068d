"""Text sources as Hugging Face `datasets` splits: train / validation / test.

Three kinds of source, all loaded through `datasets.load_dataset`:

- `stdlib`: the offline default. The running interpreter's own standard-library `.py`
  files, read from disk (never downloaded), one document per file, split by a hash
  of each file's path relative to the stdlib root, so the split is the same on every
  machine with the same Python. Its fingerprint (paths, sizes, Python version) names
  the corpus in the token cache and in MLflow.
- local files: a file, folder (recursive) or glob of txt (one document per file),
  jsonl/json or parquet (one document per row, column `text_field`).
- a hub dataset id, optionally `streaming` (SlimPajama-scale).

Sources without their own validation/test splits are split deterministically by a
hash of the document key (a txt file's path, else the document text).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cem_ablate.config import ConfigError
from cem_ablate.data.config import DataConfig, local_files, looks_like_path

SPLITS = ("train", "validation", "test")
# Large generated or test-only parts of the stdlib that would dominate a small corpus.
STDLIB_SKIP_DIRS = frozenset(
    {
        "site-packages",
        "test",
        "tests",
        "idlelib",
        "lib2to3",
        "tkinter",
        "turtledemo",
        "ensurepip",
        "encodings",
        "pydoc_data",
        "__pycache__",
        "__phello__",
        "lib-dynload",
    }
)


@dataclass
class TextSource:
    """The three splits of a text source, each with a `text` column."""

    splits: dict[str, Any]  # split -> datasets.Dataset | datasets.IterableDataset
    fingerprint: str
    description: str
    streaming: bool = False


def split_of(key: str, val_fraction: float, test_fraction: float) -> str:
    """Deterministic split of a document from a hash of its key (uniform in [0, 1))."""
    u = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + val_fraction:
        return "validation"
    return "train"


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def stdlib_files(root: Path | None = None) -> list[str]:
    """Relative paths of the stdlib's own `.py` sources, sorted.

    Skipped folders are pruned during the walk: site-packages alone holds far more
    files than the stdlib.
    """
    root = root or stdlib_root()
    out = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in STDLIB_SKIP_DIRS and not d.startswith("config-")]
        rel_folder = Path(folder).relative_to(root)
        for name in files:
            if name.endswith(".py") and not name.startswith("_sysconfigdata"):  # machine-specific flags
                out.append((rel_folder / name).as_posix())
    return sorted(out)


def files_fingerprint(root: Path, rel_paths: list[str], extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for rel in rel_paths:
        digest.update(f"{rel}\0{(root / rel).stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


def stdlib_fingerprint() -> str:
    root = stdlib_root()
    return "stdlib-" + files_fingerprint(root, stdlib_files(root), f"python {platform.python_version()}")


@contextlib.contextmanager
def quiet_local_load() -> Iterator[None]:
    """Local loads must not ping the hub's download counter (a 3 s timeout offline),
    and their per-file progress bars would only clutter a training log.

    `datasets` reads HF_UPDATE_DOWNLOAD_COUNTS once at import, so the environment
    variable is too late here: switch its config flag off for the duration instead.
    """
    import datasets

    saved = datasets.config.HF_UPDATE_DOWNLOAD_COUNTS
    bars_were_on = datasets.utils.logging.is_progress_bar_enabled()
    datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = False
    datasets.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = saved
        if bars_were_on:
            datasets.utils.logging.enable_progress_bar()


def source_fingerprint(cfg: DataConfig) -> str:
    """Names a corpus and its split without loading it (the token cache key).

    stdlib: file paths, sizes and the Python version; local files: absolute paths and
    sizes; hub: the dataset id and subset. The split fractions and text field are
    part of it, since they change what each split holds.
    """
    split = f"v{cfg.val_fraction}-t{cfg.test_fraction}"
    if cfg.source == "stdlib":
        return f"{stdlib_fingerprint()}-{split}"
    if looks_like_path(cfg.source):
        files = local_files(cfg.source)
        return "local-" + files_fingerprint(Path("/"), [str(p)[1:] for p in files], f"{cfg.text_field} {split}")
    key = f"{cfg.source}\0{cfg.subset}\0{cfg.text_field}\0{split}"
    return "hub-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def open_text_source(cfg: DataConfig) -> TextSource:
    if cfg.source == "stdlib":
        return _open_stdlib(cfg)
    if looks_like_path(cfg.source):
        return _open_local(cfg)
    return _open_hub(cfg)


def _hf_cache(cfg: DataConfig) -> str:
    return str(cfg.cache_root / "hf-datasets")


def _open_stdlib(cfg: DataConfig) -> TextSource:
    import datasets

    root = stdlib_root()
    rel_paths = stdlib_files(root)
    by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
    for rel in rel_paths:
        by_split[split_of(rel, cfg.val_fraction, cfg.test_fraction)].append(str(root / rel))
    with quiet_local_load():
        dsd = datasets.load_dataset("text", data_files=by_split, sample_by="document", cache_dir=_hf_cache(cfg))
    counts = ", ".join(f"{s} {len(by_split[s])}" for s in SPLITS)
    return TextSource(
        {s: dsd[s] for s in SPLITS},
        source_fingerprint(cfg),
        f"Python {platform.python_version()} standard library sources ({counts} files)",
    )


def _open_local(cfg: DataConfig) -> TextSource:
    import datasets

    files = local_files(cfg.source)
    if not files:
        raise ConfigError("data.source", f"{cfg.source!r} holds no txt/jsonl/json/parquet files.")
    suffixes = {p.suffix for p in files}
    if len(suffixes) > 1 and not suffixes <= {".json", ".jsonl"}:
        raise ConfigError("data.source", f"mixes file types {sorted(suffixes)}; use one type.")
    common = Path(*_common_parts(files)) if len(files) > 1 else files[0].parent
    fingerprint = source_fingerprint(cfg)
    description = f"{len(files)} local {'/'.join(sorted(suffixes))} file(s) under {common}"
    with quiet_local_load():
        if suffixes == {".txt"}:
            # One document per file: split whole files by their relative path.
            by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
            for p in files:
                rel = p.relative_to(common).as_posix()
                by_split[split_of(rel, cfg.val_fraction, cfg.test_fraction)].append(str(p))
            empty = [s for s in SPLITS if not by_split[s]]
            if empty:
                # Too few files to split by file: split by document text instead.
                ds = datasets.load_dataset(
                    "text",
                    data_files=[str(p) for p in files],
                    sample_by="document",
                    split="train",
                    cache_dir=_hf_cache(cfg),
                    streaming=cfg.streaming,
                )
                return TextSource(_hash_split(ds, cfg, "text"), fingerprint, description, cfg.streaming)
            dsd = datasets.load_dataset(
                "text",
                data_files=by_split,
                sample_by="document",
                cache_dir=_hf_cache(cfg),
                streaming=cfg.streaming,
            )
            return TextSource({s: dsd[s] for s in SPLITS}, fingerprint, description, cfg.streaming)
        builder = "parquet" if suffixes == {".parquet"} else "json"
        ds = datasets.load_dataset(
            builder,
            data_files=[str(p) for p in files],
            split="train",
            cache_dir=_hf_cache(cfg),
            streaming=cfg.streaming,
        )
    _check_text_field(ds, cfg)
    return TextSource(_hash_split(ds, cfg, cfg.text_field), fingerprint, description, cfg.streaming)


def _open_hub(cfg: DataConfig) -> TextSource:
    import datasets

    try:
        dsd = datasets.load_dataset(cfg.source, cfg.subset, cache_dir=_hf_cache(cfg), streaming=cfg.streaming)
    except Exception as err:  # noqa: BLE001  network, unknown id, gated repo: one clear line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError("data.source", f"cannot load hub dataset {cfg.source!r}: {first}") from None
    names = list(dsd.keys())
    train = dsd["train"] if "train" in dsd else dsd[names[0]]
    _check_text_field(train, cfg)
    val_name = next((n for n in ("validation", "val", "valid") if n in dsd), None)
    description = f"hub dataset {cfg.source}" + (f" ({cfg.subset})" if cfg.subset else "")
    fingerprint = source_fingerprint(cfg)
    if val_name and "test" in dsd:
        splits = {"train": train, "validation": dsd[val_name], "test": dsd["test"]}
    else:
        splits = _hash_split(train, cfg, cfg.text_field)
    return TextSource(
        {s: _only_text(d, cfg.text_field) for s, d in splits.items()}, fingerprint, description, cfg.streaming
    )


def _check_text_field(ds: Any, cfg: DataConfig) -> None:
    columns = ds.column_names
    if columns is not None and cfg.text_field not in columns:
        raise ConfigError("data.text_field", f"{cfg.text_field!r} is not a column of the data: {columns}.")


def _hash_split(ds: Any, cfg: DataConfig, field: str) -> dict[str, Any]:
    def keep(split: str):
        return lambda row: split_of(row[field], cfg.val_fraction, cfg.test_fraction) == split

    return {s: _only_text(ds.filter(keep(s)), field) for s in SPLITS}


def _only_text(ds: Any, field: str) -> Any:
    if field != "text":
        ds = ds.rename_column(field, "text")
    columns = ds.column_names
    if columns is not None and len(columns) > 1:
        ds = ds.select_columns(["text"])
    return ds


def _common_parts(paths: list[Path]) -> tuple[str, ...]:
    parts = [p.parent.parts for p in paths]
    out = []
    for group in zip(*parts):
        if len(set(group)) != 1:
            break
        out.append(group[0])
    return tuple(out)


@functools.lru_cache(maxsize=256)
def data_fingerprint(cfg: DataConfig) -> str:
    """What a run's data is, for its trial key (`RunConfig.trial_key`): the corpus and
    split for text; GP and MQAR data are fully defined by their config, which the
    variant key already holds."""
    return source_fingerprint(cfg) if cfg.task == "text" else cfg.task
