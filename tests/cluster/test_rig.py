import sys

import pytest


@pytest.mark.cluster
def test_rig_servers_answer_from_every_host(network, postgres, mlflow_server, host_env, tmp_path):
    code = (
        "import socket, sys, urllib.request\n"
        "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
        "print(urllib.request.urlopen(sys.argv[3] + '/health', timeout=5).status)\n"
    )
    for host in network.hosts:
        proc = host.popen(
            [sys.executable, "-c", code, network.gateway, str(postgres.port), mlflow_server.url],
            env=host_env(host),
            log=tmp_path / f"{host.hostname}.log",
        )
        assert proc.wait(30) == 0, (tmp_path / f"{host.hostname}.log").read_text()
