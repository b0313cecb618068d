"""Training tests share one cache (token cache, CPU peak) and one MLflow store per session."""

import pytest

from tests.data.conftest import isolated_cache  # noqa: F401  (session-wide autouse fixture)


@pytest.fixture(scope="session")
def tracking_uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
