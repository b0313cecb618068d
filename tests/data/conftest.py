"""Data tests use a fresh cache directory per session."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("cem-ablate-cache")
    saved = os.environ.get("CEM_ABLATE_CACHE")
    os.environ["CEM_ABLATE_CACHE"] = str(path)
    yield path
    if saved is None:
        os.environ.pop("CEM_ABLATE_CACHE", None)
    else:
        os.environ["CEM_ABLATE_CACHE"] = saved
