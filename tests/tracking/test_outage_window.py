"""The MLflow client's retry window (`--outage-wait`) and the one line a lost server gives.

The fast sibling of tests/tracking/test_server_outage.py (soak tier): the window is set from
the seconds asked for, MLflow's own variables win, and a real MLflow client that finds nobody
on a loopback port fails into `TrackingServerLost` naming the server, nothing else does.
"""

import pytest
from mlflow.tracking import MlflowClient

from cem_ablate.tracking.store import (
    MLFLOW_BACKOFF_VAR,
    MLFLOW_RETRIES_VAR,
    TrackingServerLost,
    lost_tracking_server,
    mlflow_retry_window,
    set_mlflow_outage_window,
)
from tests.tracking.test_mlflow_ui import free_port


@pytest.mark.parametrize("seconds", [1, 10, 60, 300, 900])
def test_the_window_covers_the_wait_asked_for_with_the_fewest_retries(seconds):
    env = {}
    window = set_mlflow_outage_window(seconds, env)
    retries, factor = int(env[MLFLOW_RETRIES_VAR]), float(env[MLFLOW_BACKOFF_VAR])
    assert window == mlflow_retry_window(retries, factor) >= seconds
    if factor == 2:  # the default backoff: one retry fewer would not cover it
        assert mlflow_retry_window(retries - 1, factor) < seconds
    assert retries <= 10  # MLflow's own limit


def test_mlflows_own_variables_win():
    env = {MLFLOW_RETRIES_VAR: "3", MLFLOW_BACKOFF_VAR: "1"}
    assert set_mlflow_outage_window(600, env) == mlflow_retry_window(3, 1.0)
    assert env == {MLFLOW_RETRIES_VAR: "3", MLFLOW_BACKOFF_VAR: "1"}


def test_a_client_that_finds_no_server_is_one_line_naming_it(monkeypatch):
    monkeypatch.setenv(MLFLOW_RETRIES_VAR, "2")
    monkeypatch.setenv(MLFLOW_BACKOFF_VAR, "0")
    uri = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    with pytest.raises(Exception) as caught:
        MlflowClient(tracking_uri=uri).get_experiment_by_name("anything")
    lost = lost_tracking_server(caught.value, uri)
    assert isinstance(lost, TrackingServerLost)
    text = str(lost)
    assert text.startswith(f"--tracking-uri: lost the MLflow server {uri} for more than 0 s (--outage-wait): ")
    assert "\n" not in text
    assert lost_tracking_server(ValueError("a bad value"), uri) is None
    assert lost_tracking_server(caught.value, "sqlite:///mlflow.db") is None  # a local store is never "lost"
