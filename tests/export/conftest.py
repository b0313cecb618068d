"""One trained tiny CEM run per session (train_run on the offline corpus, its own MLflow
store and cache), shared by tests/export and tests/evaluation."""

import pytest

from tests.data.conftest import isolated_cache  # noqa: F401  (session-wide autouse fixture)

TRAINED = {
    "name": "tiny-cem-export",
    "model": {
        "size": "tiny",
        "max_seq_len": 64,
        "attention": {"name": "cem", "steps": 2, "kq_diag": "shared"},
        "mlp": {"name": "cem", "steps": 2},
    },
    "train": {
        "lr": 3e-3,
        "batch_size": 8,
        "max_steps": 12,
        "val_every_n_steps": 12,
        "val_batches": 2,
        "test_batches": 2,
        "ckpt_every_n_steps": 12,
        "log_every_n_steps": 4,
        "threads": 1,
    },
    "data": {"block_size": 64, "tokenizer": "byte"},
}


_TRAINED_RUN: list = []  # test modules import the fixture: each import is its own fixture, one training


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, isolated_cache):
    """(run folder, tracking URI, TrainResult) of a finished tiny CEM run."""
    if not _TRAINED_RUN:
        from cem_ablate.training.config import parse_run_config
        from cem_ablate.training.engine import train_run

        root = tmp_path_factory.mktemp("trained")
        uri = f"sqlite:///{root / 'mlflow.db'}"
        result = train_run(parse_run_config(TRAINED), run_dir=root / "run", tracking_uri=uri, progress=False)
        assert result.status == "finished"
        _TRAINED_RUN.append((root / "run", uri, result))
    return _TRAINED_RUN[0]
