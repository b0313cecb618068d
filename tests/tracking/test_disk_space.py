"""A full disk recognised under what wraps it: real ENOSPC (/dev/full), real SQLite
"database or disk is full" (a page limit), through SQLAlchemy as MLflow and Optuna see it."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy

from cem_ablate.tracking.disk_space import out_of_space, out_of_space_message


def _enospc(tmp_path) -> OSError:
    """shutil's copy to a full device, as Lightning's atomic checkpoint save does it."""
    import shutil

    source = tmp_path / "last.ckpt.tmp"
    source.write_bytes(b"x" * (1 << 20))
    try:
        shutil.copyfile(source, "/dev/full")
    except OSError as err:
        return err
    pytest.skip("/dev/full did not refuse the write")


def test_enospc_is_recognised_bare_and_wrapped(tmp_path):
    err = _enospc(tmp_path)
    assert out_of_space(err)
    try:
        try:
            raise err
        except OSError as inner:
            raise RuntimeError("saving the checkpoint failed") from inner
    except RuntimeError as wrapped:
        assert out_of_space(wrapped)
        # No file named by the error (a device copy): the place given, with its free space.
        assert out_of_space_message(wrapped, [tmp_path]).startswith(f"disk full writing {tmp_path} (")
    named = OSError(28, "No space left on device", "/tmp/src", None, str(tmp_path / "last.ckpt"))
    assert out_of_space_message(named, []).startswith(f"disk full writing {tmp_path / 'last.ckpt'} (")


def test_a_full_sqlite_database_is_recognised_through_sqlalchemy(tmp_path):
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'full.db'}")

    @sqlalchemy.event.listens_for(engine, "connect")
    def limit(dbapi_connection, _):
        dbapi_connection.execute("PRAGMA max_page_count = 3")  # a disk with room for 3 pages

    with pytest.raises(sqlalchemy.exc.OperationalError) as raised, engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (v TEXT)")
        for _ in range(100):
            conn.exec_driver_sql("INSERT INTO t VALUES (?)", ("x" * 1000,))
    assert isinstance(raised.value.orig, sqlite3.OperationalError)
    assert out_of_space(raised.value)
    line = out_of_space_message(raised.value, [tmp_path])
    assert line.startswith(f"disk full writing {tmp_path} (") and "rerun the same command" in line


def test_other_failures_are_not_a_full_disk(tmp_path):
    assert not out_of_space(ValueError("loss is nan"))
    assert not out_of_space(
        RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"), [tmp_path]
    )  # plenty of space here: some other write failure
