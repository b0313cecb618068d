"""The multi-host test rig: "hosts" as network namespaces, a real PostgreSQL, a real MLflow server.

    network = Network.create(n_hosts=2)       # bridge 10.213.N.1/24 in the root namespace,
                                              # host i = namespace with eth0 = 10.213.N.(10+i)
    pg = Postgres.start(tmp, listen=[network.gateway])   # initdb + pg_ctl, password auth
    mlflow = MlflowServer.start(tmp, pg.url("mlflow"), network.gateway)
    proc = network.hosts[0].popen(["cem-ablate", "study", ...])   # runs "on" host 0

Every address is created here, on a bridge and veth pairs that exist only while the
rig does: traffic never leaves the machine. Each host also gets its own UTS namespace
(its own hostname), so a study worker on host 0 cannot see that a process of host 1 is
gone by its pid: it has to wait for the heartbeat grace period, as on real machines.
Killing a host kills every process in its network namespace (`ip netns pids`).
"""

from __future__ import annotations

import contextlib
import glob
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SUBNETS = ipaddress.ip_network("10.213.0.0/16")  # private; /24s are picked from it, unused ones only
PG_USER, PG_PASSWORD = "cem", "cem-rig-secret"


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def namespaces_unavailable() -> str | None:
    """Why this machine cannot build the rig (None: it can)."""
    if os.geteuid() != 0:
        return "the cluster rig needs root: network namespaces (ip netns add) and veth pairs"
    if shutil.which("ip") is None:
        return "the cluster rig needs iproute2's `ip` to create network namespaces"
    probe = f"cemprobe{os.getpid()}"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace here: {made.stderr.strip()}"
    run("ip", "netns", "del", probe, check=False)
    return None


def postgres_bin() -> Path | None:
    """Debian's PostgreSQL server binaries (newest version installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def free_port(host: str = "127.0.0.1") -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until(condition, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group a `start_new_session` child leads, SIGKILL what lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# -- hosts --------------------------------------------------------------------------------
@dataclass
class Host:
    namespace: str
    address: str
    hostname: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    def popen(self, cmd: list[str], *, env: dict[str, str], log: Path, cwd: Path | None = None) -> subprocess.Popen:
        """Start `cmd` on this host: its network namespace and its own hostname."""
        wrapped = [
            "ip",
            "netns",
            "exec",
            self.namespace,
            "unshare",
            "--uts",
            "sh",
            "-c",
            f'hostname {self.hostname} && exec "$@"',
            "sh",
            *cmd,
        ]
        out = open(log, "ab")
        proc = subprocess.Popen(wrapped, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.procs.append(proc)
        return proc

    def pids(self) -> list[int]:
        listed = run("ip", "netns", "pids", self.namespace, check=False).stdout.split()
        return [int(p) for p in listed]

    def freeze(self) -> None:
        """SIGSTOP every process of the host (a hang: no more steps, no heartbeats)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def kill(self) -> int:
        """Lose the machine: SIGKILL every process living in this host's namespace."""
        killed = 0
        for _ in range(5):  # a dying parent may still fork: sweep until nothing is left
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            time.sleep(0.2)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        return killed


@dataclass
class Network:
    bridge: str
    gateway: str  # the root namespace's address on the bridge: where the servers listen
    prefix: int
    hosts: list[Host]

    @classmethod
    def create(cls, n_hosts: int) -> Network:
        tag = f"{os.getpid() % 100000}"
        subnet = _unused_subnet()
        addresses = list(subnet.hosts())
        bridge = f"crb{tag}"
        net = cls(bridge, str(addresses[0]), subnet.prefixlen, [])
        try:
            run("ip", "link", "add", bridge, "type", "bridge")
            run("ip", "addr", "add", f"{net.gateway}/{subnet.prefixlen}", "dev", bridge)
            run("ip", "link", "set", bridge, "up")
            for i in range(n_hosts):
                net.hosts.append(net._add_host(f"cemrig{tag}-h{i}", f"crv{tag}h{i}", str(addresses[10 + i]), i))
        except BaseException:
            net.close()
            raise
        return net

    def _add_host(self, namespace: str, veth: str, address: str, index: int) -> Host:
        inside = veth + "p"
        run("ip", "netns", "add", namespace)
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", inside)
        run("ip", "link", "set", inside, "netns", namespace)
        run("ip", "-n", namespace, "link", "set", inside, "name", "eth0")
        run("ip", "-n", namespace, "addr", "add", f"{address}/{self.prefix}", "dev", "eth0")
        run("ip", "-n", namespace, "link", "set", "eth0", "up")
        run("ip", "-n", namespace, "link", "set", "lo", "up")
        run("ip", "link", "set", veth, "master", self.bridge)
        run("ip", "link", "set", veth, "up")
        return Host(namespace, address, f"rig-host-{index}")

    def close(self) -> None:
        for host in self.hosts:
            host.kill()
            run("ip", "netns", "del", host.namespace, check=False)  # takes its veth pair with it
        run("ip", "link", "del", self.bridge, check=False)


def _unused_subnet() -> ipaddress.IPv4Network:
    taken = [
        ipaddress.ip_interface(word).network
        for word in run("ip", "-o", "-4", "addr").stdout.split()
        if "/" in word and word[0].isdigit()
    ]
    start = os.getpid() % 200  # concurrent rigs (several sessions) start their search apart
    candidates = list(SUBNETS.subnets(new_prefix=24))
    for net in candidates[start:] + candidates[:start]:
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError(f"no free /24 in {SUBNETS}")


# -- PostgreSQL ---------------------------------------------------------------------------
@dataclass
class Postgres:
    bin: Path
    data: Path
    host: str
    port: int
    log: Path
    addresses: str = "127.0.0.1"  # listen_addresses

    @classmethod
    def start(cls, listen: list[str], databases: tuple[str, ...] = ("optuna", "mlflow")) -> Postgres:
        """initdb into a fresh folder (owned by `postgres`: the server refuses root), start it."""
        bin_dir = postgres_bin()
        root = Path(tempfile.mkdtemp(prefix="cem-rig-pg-"))
        shutil.chown(root, "postgres", "postgres")
        data, pwfile = root / "data", root / "pwfile"
        pwfile.write_text(PG_PASSWORD + "\n")
        shutil.chown(pwfile, "postgres", "postgres")
        _as_postgres(
            f"{bin_dir}/initdb -D {data} -U postgres --pwfile={pwfile} -A scram-sha-256 "
            "--no-sync --locale=C.UTF-8 -E UTF8"
        )
        with open(data / "pg_hba.conf", "a") as hba:  # the rig's hosts connect over the bridge
            for address in listen:
                hba.write(f"host all all {ipaddress.ip_network(address + '/24', strict=False)} scram-sha-256\n")
        port = free_port()
        server = cls(
            bin_dir,
            data,
            listen[0] if listen else "127.0.0.1",
            port,
            root / "server.log",
            ",".join(["127.0.0.1", *listen]),
        )
        server.start_server()
        server._create(databases)
        return server

    def start_server(self) -> None:
        """Start the server on its data folder (again, after `stop`: same port, same data)."""
        root = self.data.parent
        _as_postgres(
            f"{self.bin}/pg_ctl -D {self.data} -l {self.log} -w -t 60 -o "
            f"\"-p {self.port} -k {root} -c listen_addresses='{self.addresses}' -c fsync=off "
            f'-c max_connections=200" start'
        )

    def _create(self, databases: tuple[str, ...]) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres", user="postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {PG_USER} LOGIN PASSWORD '{PG_PASSWORD}'")
            for name in databases:
                conn.execute(f"CREATE DATABASE {name} OWNER {PG_USER}")

    def url(self, database: str, *, user: str = PG_USER, password: str = PG_PASSWORD, host: str | None = None) -> str:
        return f"postgresql://{user}:{password}@{host or self.host}:{self.port}/{database}"

    def stop(self, mode: str = "immediate") -> None:
        _as_postgres(f"{self.bin}/pg_ctl -D {self.data} -m {mode} stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.data.parent, ignore_errors=True)


def _as_postgres(command: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", command], capture_output=True, text=True, cwd="/")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{command!r} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


# -- MLflow server ------------------------------------------------------------------------
@dataclass
class MlflowServer:
    proc: subprocess.Popen
    url: str
    log: Path

    @classmethod
    def start(cls, folder: Path, backend_store_uri: str, host: str) -> MlflowServer:
        """`mlflow server` backed by PostgreSQL, listening only on `host`.

        One worker and no job execution: ready in ~12 s instead of ~50 s (NOTES.md).
        """
        port = free_port(host)
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true")
        log = folder / "mlflow-server.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mlflow",
                    "server",
                    "--backend-store-uri",
                    backend_store_uri,
                    "--artifacts-destination",
                    str(folder / "artifacts"),
                    "--host",
                    host,
                    "--port",
                    str(port),
                    "--workers",
                    "1",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = cls(proc, f"http://{host}:{port}", log)
        try:
            wait_until(server.healthy, 180, f"the MLflow server ({log})", interval=0.5)
        except BaseException:
            server.stop()
            raise
        return server

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the MLflow server exited: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        stop_group(self.proc)
