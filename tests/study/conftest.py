import pytest

from tests.study.tiny_study import make_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """One small local corpus per test session (its token cache is built once)."""
    return make_corpus(tmp_path_factory.mktemp("corpus"))
