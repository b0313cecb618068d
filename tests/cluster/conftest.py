"""The rig's servers and hosts, shared by every cluster test of a session (started once).

Tests that need namespaces skip, with the reason, where the machine cannot make them
(not root); the PostgreSQL server needs Debian's `postgresql` package (.ci/run installs it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.cluster import rig
from tests.study.tiny_study import make_corpus


@pytest.fixture(scope="session")
def network():
    reason = rig.namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    net = rig.Network.create(n_hosts=4)
    yield net
    net.close()


@pytest.fixture(scope="session")
def postgres(network):
    if rig.postgres_bin() is None:
        pytest.fail("PostgreSQL server binaries missing: apt-get install -y postgresql (.ci/run does)")
    server = rig.Postgres.start(listen=[network.gateway])
    yield server
    server.remove()


@pytest.fixture(scope="session")
def mlflow_server(postgres, network):
    folder = Path(tempfile.mkdtemp(prefix="cem-rig-mlflow-"))
    server = rig.MlflowServer.start(folder, postgres.url("mlflow"), network.gateway)
    yield server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def rig_corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("rig-corpus"))


@pytest.fixture
def host_env(tmp_path):
    """The environment of a process on a rig host: offline, its own cache per host."""

    def env(host: rig.Host, **extra: str) -> dict[str, str]:
        cache = tmp_path / "cache" / host.hostname
        cache.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "CEM_ABLATE_CACHE": str(cache),
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    return env
