"""Running `cem-ablate study` on rig hosts and reading back what the shared stores hold."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.cluster import rig
from tests.study.tiny_study import write_study

# A dead host's trial is retried GRACE_S after its last heartbeat. Not much shorter:
# on a loaded machine a live worker's heartbeats can stall for seconds, and a live
# trial taken for dead is trained twice (a 4 s grace did that before the heartbeat
# started at the claim, study.worker).
HEARTBEAT_S, GRACE_S = 2, 20


def study_command(file: Path, storage: str, tracking_uri: str, workdir: Path) -> list[str]:
    """The command every host runs (docs/reproducing.md, "Many machines")."""
    return [
        sys.executable,
        "-m",
        "cem_ablate.cli.main",
        "study",
        str(file),
        "--workers",
        "1",
        "--storage",
        storage,
        "--tracking-uri",
        tracking_uri,
        "--workdir",
        str(workdir),
        "--heartbeat",
        str(HEARTBEAT_S),
        "--grace",
        str(GRACE_S),
        "--no-report",
    ]


def make_study(folder: Path, name: str, corpus: Path, grid, max_steps: int, variants: int = 2, **train) -> Path:
    """A tiny study; `grid` differs between tests so no test can reuse another's trials."""
    path = write_study(folder, name=name, grid=grid, max_steps=max_steps, corpus=corpus)
    if variants == 1 or train:
        import yaml

        mapping = yaml.safe_load(path.read_text())
        mapping["variants"] = mapping["variants"][:variants]
        mapping["base"]["train"].update(train)
        path.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return path


@dataclass
class Trial:
    study: str  # Optuna study (one per variant)
    slot: str  # grid point, e.g. "lr=0.002,seed=0" (MLflow tag cem_ablate.slot of its child run)
    state: str  # Optuna's TrialState name
    host: str | None  # hostname of the worker that claimed it
    status: str | None  # the study's own status attribute ("duplicate": a claim that yielded, never trained)

    @property
    def key(self) -> tuple[str, str]:
        return self.study, self.slot


def optuna_trials(storage_url: str, study_name: str) -> list[Trial]:
    """Every Optuna trial of every variant of the study (one Optuna study per variant)."""
    import optuna

    storage = optuna.storages.RDBStorage(storage_url)
    out: list[Trial] = []
    for summary in storage.get_all_studies():
        if not summary.study_name.startswith(study_name + "/"):  # variants.optuna_study_name
            continue
        for t in storage.get_all_trials(storage.get_study_id_from_name(summary.study_name), deepcopy=False):
            worker = t.user_attrs.get("worker") or {}
            out.append(
                Trial(
                    summary.study_name,
                    str(t.user_attrs.get("slot")),
                    t.state.name,
                    worker.get("host") if isinstance(worker, dict) else None,
                    t.user_attrs.get("status"),
                )
            )
    storage.engine.dispose()
    return out


@dataclass
class Runs:
    parents: list
    children: list

    def child_steps(self, client, run, key: str = "train_loss") -> Counter:
        """How many times each step of `key` was logged (2 = trained twice)."""
        return Counter(m.step for m in client.get_metric_history(run.info.run_id, key))


def trained(trials: list[Trial]) -> list[Trial]:
    """Trials that trained (or were training): not the bookkeeping of two hosts queuing
    one slot at once, where the later claim yields (study.trials `_is_duplicate`)."""
    return [t for t in trials if t.status != "duplicate"]


def mlflow_runs(tracking_uri: str, study_name: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(study_name)
    assert experiment is not None, f"no MLflow experiment {study_name!r}"
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return client, Runs(parents, children)


def wait_all(procs, timeout: float, logs: list[Path]) -> list[int]:
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout))
        except subprocess.TimeoutExpired:
            raise AssertionError("a host did not finish:\n" + "\n".join(tail(p) for p in logs)) from None
    return codes


def tail(log: Path, chars: int = 3000) -> str:
    return f"--- {log}\n" + (log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)")


def host_logs(tmp_path: Path, hosts: list[rig.Host]) -> list[Path]:
    return [tmp_path / f"{h.hostname}.log" for h in hosts]
