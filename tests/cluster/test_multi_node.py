"""One trial across two hosts (`train.num_nodes: 2`, gloo) and `cem-ablate train` as SLURM tasks."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from tests.cluster import rig
from tests.cluster.studies import wait_all
from tests.study.tiny_study import TINY_BASE

pytestmark = pytest.mark.cluster
STEPS = 6


def write_run_config(folder: Path, corpus: Path, name: str) -> Path:
    cfg = {"name": name, **{k: dict(v) for k, v in TINY_BASE.items()}}
    cfg["train"].update(
        max_steps=STEPS, log_every_n_steps=1, ckpt_every_n_steps=STEPS, val_every_n_steps=STEPS, lr=2e-3, threads=1
    )
    cfg["data"]["source"] = str(corpus)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def train_command(config: Path, run_dir: Path, tracking_uri: str, experiment: str, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cem_ablate.cli.main",
        "train",
        str(config),
        *overrides,
        "--run-dir",
        str(run_dir),
        "--tracking-uri",
        tracking_uri,
        "--experiment",
        experiment,
        "--no-progress",
    ]


def losses(tracking_uri: str, experiment: str) -> dict[int, float]:
    """The train-loss curve of the experiment's one and only run."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return {m.step: m.value for m in client.get_metric_history(runs[0].info.run_id, "train_loss")}


@pytest.mark.soak
def test_one_trial_on_two_hosts_matches_two_processes_on_one(network, mlflow_server, host_env, rig_corpus, tmp_path):
    config = write_run_config(tmp_path, rig_corpus, "rig-ddp")
    port = rig.free_port()
    hosts = network.hosts[:2]
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    # Each node runs the same command; Lightning joins them through MASTER_ADDR:PORT (node 0).
    procs = [
        h.popen(
            train_command(
                config,
                tmp_path / "run-2nodes",
                mlflow_server.url,
                "rig-ddp-2nodes",
                "train.num_nodes=2",
                "train.devices=1",
            ),
            env=host_env(
                h, MASTER_ADDR=hosts[0].address, MASTER_PORT=str(port), NODE_RANK=str(i), GLOO_SOCKET_IFNAME="eth0"
            ),
            log=log,
        )
        for i, (h, log) in enumerate(zip(hosts, logs))
    ]
    # The reference: the same config as 2 processes (Lightning's launcher) on one host.
    single_log = tmp_path / "single.log"
    single = hosts[1].popen(
        train_command(config, tmp_path / "run-1node", mlflow_server.url, "rig-ddp-1node", "train.devices=2"),
        env=host_env(hosts[1], MASTER_PORT=str(rig.free_port()), GLOO_SOCKET_IFNAME="lo"),
        log=single_log,
    )
    assert wait_all([*procs, single], 300, [*logs, single_log]) == [0, 0, 0]

    two_nodes, one_node = losses(mlflow_server.url, "rig-ddp-2nodes"), losses(mlflow_server.url, "rig-ddp-1node")
    assert sorted(two_nodes) == list(range(STEPS)) and sorted(one_node) == sorted(two_nodes)
    for step, loss in one_node.items():
        assert two_nodes[step] == pytest.approx(loss, abs=1e-5), step
    result = json.loads((tmp_path / "run-2nodes" / "result.json").read_text())
    assert result["status"] == "finished" and result["steps"] == STEPS


def slurm_task_env(procid: int, ntasks: int, job_id: str) -> dict[str, str]:
    """What `srun --nodes=1 --ntasks-per-node=N` sets for task `procid` (the variables
    Lightning's SLURMEnvironment and our rank detection read, and their usual company)."""
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_JOB_NAME": "cem-train",
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_NTASKS_PER_NODE": str(ntasks),
        "SLURM_TASKS_PER_NODE": str(ntasks),
        "SLURM_NNODES": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(procid),
        "SLURM_NODELIST": "127.0.0.1",
        "SLURM_JOB_NODELIST": "127.0.0.1",
        "SLURM_STEP_NODELIST": "127.0.0.1",
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_NUM_NODES": "1",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1",
        "SLURMD_NODENAME": "localhost",
        "SLURM_SUBMIT_DIR": os.getcwd(),
    }


def test_srun_tasks_make_one_run_and_one_result(rig_corpus, tmp_path):
    """`srun --ntasks-per-node=2 cem-ablate train ...`: each task is one DDP rank
    (Lightning's SLURMEnvironment); only task 0 may open an MLflow run and write the
    run folder. Runs as plain local processes: no root needed."""
    import subprocess

    config = write_run_config(tmp_path, rig_corpus, "rig-slurm")
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    port = rig.free_port()
    job_id = str(90000 + port - 15000) if 15000 <= port < 25000 else "4242"  # Lightning: port = 15000 + id[-4:]
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    base.update(
        CEM_ABLATE_CACHE=str(tmp_path / "cache"),
        HF_DATASETS_OFFLINE="1",
        MLFLOW_DISABLE_TELEMETRY="true",
        MASTER_PORT=str(port),
    )
    logs = [tmp_path / f"task{i}.log" for i in range(2)]
    procs = []
    for i, log in enumerate(logs):
        with open(log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    train_command(config, tmp_path / "run", tracking, "rig-slurm", "train.devices=2"),
                    env={**base, **slurm_task_env(i, 2, job_id)},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    try:
        assert wait_all(procs, 300, logs) == [0, 0]
    finally:
        for proc in procs:
            rig.stop_group(proc)
    assert len(losses(tracking, "rig-slurm")) == STEPS  # exactly one MLflow run, with the whole curve
    assert sorted(p.name for p in (tmp_path / "run").glob("result*.json")) == ["result.json"]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "finished"
