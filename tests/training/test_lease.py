"""The lease on a run folder (training.lease): who may still write a run's files."""

import pytest

from cem_ablate.training.config import parse_run_config
from cem_ablate.training.lease import Lease, LeaseLost
from cem_ablate.training.result import TrainResult
from cem_ablate.training.run_directory import RunDirectory
from tests.training.helpers import tiny_run


def test_a_lease_holds_while_the_folder_names_it_and_its_claim_is_live(tmp_path):
    live = {"a": True}
    cfg = parse_run_config(tiny_run())
    first = RunDirectory(tmp_path / "run", Lease("s#1", lambda: live["a"]))
    first.claim(cfg, resume=True)
    assert (tmp_path / "run" / "lease").read_text().strip() == "s#1"
    first.write_result(TrainResult("finished", steps=1))
    # another attempt takes the folder over: the first may write nothing more
    RunDirectory(tmp_path / "run", Lease("s#2", lambda: True)).claim(cfg, resume=True)
    with pytest.raises(LeaseLost, match="held by s#2"):
        first.write_result(TrainResult("failed", steps=2))
    with pytest.raises(LeaseLost):
        first.remember_run("sqlite:///x.db", "abc")
    assert first.read_result().status == "finished" and not first.tracking_file.exists()


def test_a_dead_claim_neither_takes_a_folder_nor_writes_in_it(tmp_path):
    cfg = parse_run_config(tiny_run())
    live = {"a": True}
    folder = RunDirectory(tmp_path / "run", Lease("s#1", lambda: live["a"]))
    folder.claim(cfg, resume=True)
    live["a"] = False
    with pytest.raises(LeaseLost, match="no longer live"):
        folder.write_result(TrainResult("finished", steps=1))
    assert not folder.result_file.exists()
    late = RunDirectory(tmp_path / "other", Lease("s#3", lambda: False))
    with pytest.raises(LeaseLost):
        late.claim(cfg, resume=True)
    assert not (tmp_path / "other").exists()


def test_a_folder_without_a_lease_is_written_unconditionally(tmp_path):
    folder = RunDirectory(tmp_path / "run")
    folder.claim(parse_run_config(tiny_run()), resume=True)
    folder.write_result(TrainResult("finished", steps=1))
    assert folder.read_result().steps == 1 and not folder.lease_file.exists()
