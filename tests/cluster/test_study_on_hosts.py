"""A study shared by two hosts through PostgreSQL and an MLflow server; losing a host mid-trial."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster import rig
from tests.cluster.studies import (
    host_logs,
    make_study,
    mlflow_runs,
    optuna_trials,
    study_command,
    tail,
    trained,
    wait_all,
)

pytestmark = pytest.mark.cluster


def test_two_hosts_train_every_grid_point_once(network, postgres, mlflow_server, host_env, rig_corpus, tmp_path):
    name = "rig-shared"
    grid = (1.1e-3, 2.2e-3)
    file = make_study(tmp_path, name, rig_corpus, grid, max_steps=4)
    hosts = network.hosts[:2]
    logs = host_logs(tmp_path, hosts)
    procs = [
        h.popen(
            study_command(file, postgres.url("optuna"), mlflow_server.url, tmp_path / "work"), env=host_env(h), log=log
        )
        for h, log in zip(hosts, logs)
    ]
    assert wait_all(procs, 240, logs) == [0, 0], "\n".join(tail(p) for p in logs)
    assert not any(rig.PG_PASSWORD in log.read_text(errors="replace") for log in logs)  # masked everywhere

    trials = trained(optuna_trials(postgres.url("optuna", host="127.0.0.1"), name))
    complete = [t.key for t in trials if t.state == "COMPLETE"]
    assert len(complete) == 2 * len(grid) and len(set(complete)) == len(complete), trials
    assert not [t for t in trials if t.state != "COMPLETE"], trials
    assert {t.host for t in trials} == {h.hostname for h in hosts}, "both hosts should have trained"

    client, runs = mlflow_runs(mlflow_server.url, name)
    assert len(runs.parents) == 2, [r.info.run_name for r in runs.parents]
    by_parent = {p.info.run_id: 0 for p in runs.parents}
    for child in runs.children:
        by_parent[child.data.tags["mlflow.parentRunId"]] += 1
        assert child.info.status == "FINISHED"
        assert max(runs.child_steps(client, child).values()) == 1  # every step trained once
    assert sorted(by_parent.values()) == [len(grid), len(grid)]


@dataclass
class HostLoss:
    """One study, two hosts: `victim` is lost mid-trial, `survivor` takes over."""

    name: str
    grid: tuple[float, float]
    shared_workdir: bool
    victim: rig.Host
    survivor: rig.Host
    folder: Path

    def workdir(self, host: rig.Host) -> Path:
        return self.folder / ("work" if self.shared_workdir else f"work-{host.hostname}")

    def start(self, host: rig.Host, postgres, mlflow_server, host_env):
        command = study_command(self.file, postgres.url("optuna"), mlflow_server.url, self.workdir(host))
        return host.popen(command, env=host_env(host), log=self.folder / f"{host.hostname}.log")

    @property
    def file(self) -> Path:
        return self.folder / f"{self.name}.yaml"


@pytest.mark.soak
def test_losing_a_host_mid_trial_retries_it_once(network, postgres, mlflow_server, host_env, rig_corpus, tmp_path):
    """A host is killed (every process) after its trial's first checkpoint; the other
    host takes the trial over after the grace period: from that checkpoint when both
    see the same --workdir, from step 0 when each host has its own disk. Both cases
    run at once, as two studies on four hosts."""
    h = network.hosts
    cases = [
        HostLoss("rig-loss-shared", (1.3e-3, 2.6e-3), True, h[0], h[1], tmp_path / "shared"),
        HostLoss("rig-loss-own", (1.7e-3, 3.4e-3), False, h[2], h[3], tmp_path / "own"),
    ]
    for case in cases:
        case.folder.mkdir()
        make_study(
            case.folder,
            case.name,
            rig_corpus,
            case.grid,
            max_steps=60,
            variants=1,
            ckpt_every_n_steps=10,
            val_every_n_steps=30,
            log_every_n_steps=1,
        )
    victims = [case.start(case.victim, postgres, mlflow_server, host_env) for case in cases]
    frozen: dict[int, Path] = {}

    def freeze_at_checkpoints() -> bool:
        """Stop each victim as soon as its trial has a checkpoint: mid-trial, for sure
        (it would finish in seconds)."""
        for i, case in enumerate(cases):
            checkpoint = next(case.workdir(case.victim).rglob("last.ckpt"), None)
            if i not in frozen and checkpoint is not None:
                case.victim.freeze()
                frozen[i] = checkpoint
        return len(frozen) == len(cases)

    try:
        rig.wait_until(freeze_at_checkpoints, 240, "a checkpoint on every victim", interval=0.05)
    except TimeoutError as err:
        raise AssertionError(
            "\n".join([str(err), *(tail(c.folder / f"{c.victim.hostname}.log") for c in cases)])
        ) from err
    survivors = []
    for i, (case, victim_proc) in enumerate(zip(cases, victims)):
        assert not (frozen[i].parent.parent / "result.json").exists(), "the victim finished before it stopped"
        survivors.append(case.start(case.survivor, postgres, mlflow_server, host_env))
        assert case.victim.kill() > 0 and victim_proc.poll() is not None
    logs = [c.folder / f"{c.survivor.hostname}.log" for c in cases]
    assert wait_all(survivors, 400, logs) == [0, 0], "\n".join(tail(p) for p in logs)
    for case in cases:
        check_host_loss(case, postgres, mlflow_server)


def check_host_loss(case: HostLoss, postgres, mlflow_server) -> None:
    trials = trained(optuna_trials(postgres.url("optuna", host="127.0.0.1"), case.name))
    states = sorted((t.slot, t.state, t.host) for t in trials)
    killed = [t for t in trials if t.host == case.victim.hostname]
    assert len(killed) == 1 and killed[0].state == "FAIL", states  # the lost trial, marked failed once
    complete = [t.key for t in trials if t.state == "COMPLETE"]
    assert sorted(complete) == sorted({t.key for t in trials}) and len(complete) == len(case.grid), states
    assert len(trials) == len(case.grid) + 1, states  # retried exactly once

    client, runs = mlflow_runs(mlflow_server.url, case.name)
    assert len(runs.parents) == 1 and len(runs.children) == len(case.grid)
    lost = next(c for c in runs.children if c.data.tags.get("cem_ablate.slot") == killed[0].slot)
    steps = runs.child_steps(client, lost)
    assert lost.info.status == "FINISHED" and max(steps) == 59
    assert len(steps) >= 59  # a kill right after a checkpoint loses that step's point (test_worker_restart)
    # Steps up to the checkpoint: logged once, whether the survivor resumed from it (shared
    # disk) or started over on its own disk (a resumed or retried attempt logs only
    # past the last step its MLflow run already holds, so no point is written twice).
    assert steps[min(steps)] == 1, (case.name, case.shared_workdir, sorted(steps.items()))
