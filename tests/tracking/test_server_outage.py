"""A real `mlflow server` killed mid-trial (tracking.store: the client's retry window).

Back within the window on the same port, the study ends as if nothing happened: exit
0, every run FINISHED, the objective of the uninterrupted run, every (metric, step) of
the curves recorded once and none missing. Away for longer than `--outage-wait`, the
trial in training stops as a server failure: one `error: --tracking-uri:` line naming
the server, the trial queued again (WAITING, not FAIL), no result written.
"""

import time

import pytest
from optuna.trial import TrialState

from cem_ablate.tracking.server import TrackingServer
from cem_ablate.training.checkpoints import CheckpointFiles
from tests.study.conftest import corpus  # noqa: F401  (the session corpus fixture)
from tests.study.test_coordinator import optuna_trials
from tests.study.test_preemption import _child_histories, _objectives, _run, _start, _study_file
from tests.tracking.test_mlflow_ui import free_port


def _timed(key: str) -> bool:
    """Metrics sampled by the wall clock (throughput, system/...): their steps depend on the run's speed."""
    return key in ("tokens_per_sec", "mfu") or key.startswith("system/")


def _server(tmp_path, port: int) -> TrackingServer:
    server = TrackingServer(f"sqlite:///{tmp_path / 'server.db'}", "127.0.0.1", port, str(tmp_path / "artifacts"))
    server.start()
    assert server.wait_ready(), "the MLflow server did not start"
    return server


def _after_a_checkpoint(proc, root):
    deadline = time.monotonic() + 600
    while not any(CheckpointFiles(d).newest_step() is not None for d in root.rglob("checkpoints")):
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.05)


def _outage_mid_trial(tmp_path, corpus, outage_s: float):
    path = _study_file(tmp_path, corpus, "outage", [2e-3], steps=60)
    port = free_port()
    server = _server(tmp_path, port)
    uri = server.url
    proc = _start(path, tmp_path / "job", 1, None, "--tracking-uri", uri)
    try:
        _after_a_checkpoint(proc, tmp_path / "job")
        server.stop()  # mid-trial: the client's requests find nobody on the port
        time.sleep(outage_s)
        server = _server(tmp_path, port)  # back on the same port (its start takes seconds more)
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]
        histories = _child_histories(tmp_path / "job", "outage", uri)  # every child FINISHED
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    _run(path, tmp_path / "straight")
    assert _objectives(tmp_path / "job") == _objectives(tmp_path / "straight")  # bit for bit
    reference = _child_histories(tmp_path / "straight", "outage")
    for slot, metrics in histories.items():
        assert all(max(steps.values()) == 1 for steps in metrics.values()), metrics  # no step twice
        assert {k: set(v) for k, v in metrics.items() if not _timed(k)} == {
            k: set(v) for k, v in reference[slot].items() if not _timed(k)
        }  # none missing


@pytest.mark.slow
@pytest.mark.soak  # in CI the retry window and the lost-server line: tests/tracking/test_outage_window.py
def test_a_short_tracking_server_outage_mid_trial_costs_nothing(tmp_path, corpus):
    _outage_mid_trial(tmp_path, corpus, outage_s=3)


@pytest.mark.slow
@pytest.mark.soak
def test_a_20_s_tracking_server_outage_mid_trial_costs_nothing(tmp_path, corpus):
    _outage_mid_trial(tmp_path, corpus, outage_s=20)


@pytest.mark.slow
@pytest.mark.soak  # in CI the server back within the window (the short outage above)
def test_a_tracking_server_away_past_the_window_queues_the_trial_with_one_line(tmp_path, corpus):
    path = _study_file(tmp_path, corpus, "lost", [2e-3], steps=400)
    port = free_port()
    server = _server(tmp_path, port)
    proc = _start(path, tmp_path / "job", 1, None, "--tracking-uri", server.url, "--outage-wait", "10")
    try:
        _after_a_checkpoint(proc, tmp_path / "job")
        server.stop()
        stopped = time.monotonic()
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    print(f"server away: the study ended {time.monotonic() - stopped:.0f} s after the server stopped")
    assert proc.returncode == 2, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: --tracking-uri: lost the MLflow server http://127.0.0.1:{port} for more than 12 s"
    ), out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    (trial,) = [t for ts in optuna_trials(tmp_path / "job").values() for t in ts]
    assert trial.state == TrialState.WAITING, trial  # queued again, not failed
    assert not list((tmp_path / "job").rglob("result.json"))  # nothing half-recorded
