"""The guard in tests/conftest.py sees what a forgetful test would leave in the
repository: the default MLflow store (cwd/mlruns/mlflow.db), a study folder, a report."""

from cem_ablate.tracking.store import default_tracking_uri, make_client
from tests.conftest import changed_outputs, repo_outputs


def test_the_guard_sees_a_default_store_a_study_folder_and_a_new_top_level_folder(tmp_path):
    (tmp_path / "mlruns").mkdir()
    (tmp_path / "mlruns" / ".gitkeep").touch()
    start = repo_outputs(tmp_path)
    assert changed_outputs(start, repo_outputs(tmp_path)) == []

    make_client(default_tracking_uri(tmp_path)).create_experiment("mfu-truncated")  # what test_engine did
    after_store = repo_outputs(tmp_path)
    assert "mlruns/mlflow.db" in changed_outputs(start, after_store)

    (tmp_path / "mlruns" / "studies" / "quickstart").mkdir(parents=True)
    assert changed_outputs(after_store, repo_outputs(tmp_path)) == ["mlruns/studies", "mlruns/studies/quickstart"]

    (tmp_path / "lightning_logs").mkdir()
    assert "lightning_logs" in changed_outputs(after_store, repo_outputs(tmp_path))
