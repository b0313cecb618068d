"""A study shared by two hosts through PostgreSQL and an MLflow server; losing a host mid-trial."""

from __future__ import annotations

import pytest

from tests.cluster import rig
from tests.cluster.studies import (
    host_logs, make_study, mlflow_runs, optuna_trials, study_command, tail, trained, wait_all)

pytestmark = pytest.mark.cluster


def test_two_hosts_train_every_grid_point_once(network, postgres, mlflow_server, host_env, rig_corpus, tmp_path):
    name = "rig-shared"
    grid = (1.1e-3, 2.2e-3)
    file = make_study(tmp_path, name, rig_corpus, grid, max_steps=4)
    hosts = network.hosts[:2]
    logs = host_logs(tmp_path, hosts)
    procs = [h.popen(study_command(file, postgres.url("optuna"), mlflow_server.url, tmp_path / "work"),
                     env=host_env(h), log=log) for h, log in zip(hosts, logs)]
    assert wait_all(procs, 240, logs) == [0, 0], "\n".join(tail(p) for p in logs)

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


@pytest.mark.parametrize("shared_workdir", [True, False], ids=["shared-workdir", "own-workdirs"])
def test_losing_a_host_mid_trial_retries_it_once(network, postgres, mlflow_server, host_env, rig_corpus, tmp_path,
                                                 shared_workdir):
    """Host 0 is killed (every process) after its trial's first checkpoint; host 1
    takes the trial over after the grace period: from that checkpoint when both see the
    same --workdir, from step 0 when each host has its own disk."""
    name = f"rig-loss-{'shared' if shared_workdir else 'own'}"
    grid = (1.3e-3, 2.6e-3) if shared_workdir else (1.7e-3, 3.4e-3)
    file = make_study(tmp_path, name, rig_corpus, grid, max_steps=60, variants=1,
                      ckpt_every_n_steps=10, val_every_n_steps=30, log_every_n_steps=1)
    victim, survivor = network.hosts[:2] if shared_workdir else network.hosts[2:4]
    logs = host_logs(tmp_path, [victim, survivor])

    def workdir(host):
        return tmp_path / ("work" if shared_workdir else f"work-{host.hostname}")

    victim_proc = victim.popen(study_command(file, postgres.url("optuna"), mlflow_server.url, workdir(victim)),
                               env=host_env(victim), log=logs[0])
    checkpoint = rig.wait_until(lambda: next(workdir(victim).rglob("last.ckpt"), None), 180,
                                f"a checkpoint of host 0 ({tail(logs[0])})", interval=0.05)
    victim.freeze()  # mid-trial, deterministically: it would finish in seconds
    assert not (checkpoint.parent.parent / "result.json").exists(), "host 0 finished before it was stopped"
    survivor_proc = survivor.popen(study_command(file, postgres.url("optuna"), mlflow_server.url,
                                                 workdir(survivor)), env=host_env(survivor), log=logs[1])
    assert victim.kill() > 0 and victim_proc.poll() is not None

    assert wait_all([survivor_proc], 300, logs) == [0], tail(logs[1])
    trials = trained(optuna_trials(postgres.url("optuna", host="127.0.0.1"), name))
    states = sorted((t.slot, t.state, t.host) for t in trials)
    killed = [t for t in trials if t.host == victim.hostname]
    assert len(killed) == 1 and killed[0].state == "FAIL", states  # the lost trial, marked failed once
    complete = [t.key for t in trials if t.state == "COMPLETE"]
    assert sorted(complete) == sorted({t.key for t in trials}) and len(complete) == len(grid), states
    assert len(trials) == len(grid) + 1, states  # retried exactly once

    client, runs = mlflow_runs(mlflow_server.url, name)
    assert len(runs.parents) == 1 and len(runs.children) == len(grid)
    lost = next(c for c in runs.children if c.data.tags.get("cem_ablate.slot") == killed[0].slot)
    steps = runs.child_steps(client, lost)
    assert lost.info.status == "FINISHED" and len(steps) == 60  # steps 0..59, each logged
    # Steps up to the checkpoint: logged once when the survivor resumed from it, twice
    # when it had to start over on its own disk.
    assert steps[min(steps)] == (1 if shared_workdir else 2), sorted(steps.items())
