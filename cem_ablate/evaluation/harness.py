"""`cem-ablate eval`: lm-evaluation-harness on a trained run, through its export.

The run is exported (cem_ablate/export) into a temporary folder and loaded by the
harness's own `HFLM` with `trust_remote_code=True`, exactly as a user would load it,
so the scores are the harness's on the exported model. Tasks are named as the harness
names them, or defined by local YAML under `include_path`. Metrics are flattened to
`eval/<task>/<metric>` (`acc`, `acc_norm`, `word_perplexity`, ...; a filter other than
`none` is appended, `acc_<filter>`), printed, and logged to the run's MLflow run.

Before any scoring, every task name is checked (an unknown one: one ConfigError with
the closest names) and every task is built, which is when the harness fetches its
data: offline, a task whose data set is on the Hub fails there, as one ConfigError.
Standard errors are not computed (`bootstrap_iters=0`: the bootstrap of perplexity
metrics takes minutes); a study compares seeds instead (docs/design/experiments.md#s8-learning-rate-search).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cem_ablate.config import ConfigError
from cem_ablate.config.errors import closest
from cem_ablate.export.hf_directory import export_run
from cem_ablate.training.trained_run import TrainedRun, load_trained_run

METRIC_PREFIX = "eval/"


@dataclass(frozen=True)
class EvalSpec:
    """What to evaluate: harness task names (or groups/tags), local task folders, a limit."""

    tasks: tuple[str, ...]
    include_path: str | None = None
    limit: int | None = None  # documents per task (None: all)
    batch_size: int = 1
    device: str = "cpu"


def _harness():
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as err:
        raise ConfigError(
            "eval", f"lm-evaluation-harness is not installed ({err}); pip install 'cem-ablate[eval]'."
        ) from None
    for name in ("lm_eval", "lm-eval", "accelerate"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return lm_eval, HFLM, TaskManager


@functools.lru_cache(maxsize=4)
def _task_manager(factory, include_path: str | None):
    """One index of the harness's task YAML files per folder set (indexing them takes seconds)."""
    return factory(include_path=include_path)


def load_tasks(spec: EvalSpec, path: str = "eval.tasks") -> tuple[object, list]:
    """(TaskManager, the built tasks): every name known, every task's data loaded."""
    _, _, TaskManager = _harness()
    if spec.include_path is not None and not Path(spec.include_path).is_dir():
        raise ConfigError("eval.include_path", f"{spec.include_path} is not a folder of task YAML files.")
    manager = _task_manager(TaskManager, spec.include_path)
    known = set(manager.all_tasks)
    for name in spec.tasks:
        if name not in known:
            raise ConfigError(
                path,
                f"unknown lm-evaluation-harness task {name!r}.{closest(name, known)} "
                "(`lm-eval ls tasks` lists them; a local task needs --include-path).",
            )
    built = []
    for name in spec.tasks:
        try:
            loaded = manager.load([name])
        except Exception as err:  # noqa: BLE001 - offline Hub, missing file, bad YAML: one line each
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ConfigError(
                path,
                f"task {name!r} cannot load its data ({type(err).__name__}: {first}); "
                "offline, a task whose data set is on the Hugging Face Hub needs it cached "
                "(or a local task YAML with local data files).",
            ) from None
        built.append(loaded["groups"].get(name) or list(loaded["tasks"].values()))
    return manager, [t for item in built for t in (item if isinstance(item, list) else [item])]


def flatten_results(results: dict) -> dict[str, float]:
    """The harness's `results` section as `eval/<task>/<metric>` floats."""
    out = {}
    for task, values in results.items():
        for key, value in values.items():
            if "," not in key or "_stderr" in key or isinstance(value, bool):
                continue
            metric, filter_name = key.split(",", 1)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            suffix = "" if filter_name == "none" else "_" + "".join(c if c.isalnum() else "_" for c in filter_name)
            out[f"{METRIC_PREFIX}{task}/{metric}{suffix}"] = float(value)
    return out


def run_harness(
    trained: TrainedRun, spec: EvalSpec, loaded: tuple[object, list] | None = None, log_samples: bool = False
) -> dict:
    """The harness's whole output on a loaded run (exported to a temporary folder);
    `loaded` is `load_tasks(spec)` when the caller built the tasks already."""
    if trained.tokenizer is None:
        raise ConfigError(
            "RUN_DIR", f"{trained.folder.path} has no text tokenizer (an MQAR run); lm-evaluation-harness scores text."
        )
    lm_eval, HFLM, _ = _harness()
    manager, tasks = loaded or load_tasks(spec)
    with tempfile.TemporaryDirectory(prefix="cem-ablate-eval-") as tmp:
        # A name of its own: Hugging Face caches remote code per folder name, and two
        # evaluations (study workers) must not share one.
        folder = export_run(trained, Path(tmp) / "".join(c if c.isalnum() else "_" for c in Path(tmp).name))
        model = HFLM(
            pretrained=str(folder),
            trust_remote_code=True,
            dtype="float32",
            device=spec.device,
            batch_size=spec.batch_size,
            backend="causal",
        )
        return lm_eval.simple_evaluate(
            model=model, tasks=tasks, task_manager=manager, limit=spec.limit, bootstrap_iters=0, log_samples=log_samples
        )


def evaluate_trained(
    trained: TrainedRun, spec: EvalSpec, loaded: tuple[object, list] | None = None
) -> dict[str, float]:
    return flatten_results(run_harness(trained, spec, loaded)["results"])


def evaluate_run(
    path: str | Path, spec: EvalSpec, *, log: bool = True
) -> tuple[TrainedRun, dict[str, float], str | None]:
    """Evaluate RUN_DIR|CHECKPOINT; log the metrics to the run's MLflow run when its
    folder names one. Returns (run, metrics, the MLflow run id logged to or None)."""
    loaded = load_tasks(spec)  # names and data are checked before the model is loaded or exported
    trained = load_trained_run(path)
    metrics = evaluate_trained(trained, spec, loaded)
    run_id = None
    if log and trained.folder.tracking_file.is_file():
        tracking = json.loads(trained.folder.tracking_file.read_text())
        from cem_ablate.tracking.eval_metrics import log_eval_metrics

        log_eval_metrics(tracking["tracking_uri"], tracking["run_id"], metrics)
        run_id = tracking["run_id"]
    return trained, metrics, run_id


def format_metrics(metrics: dict[str, float]) -> str:
    width = max((len(k) for k in metrics), default=10)
    return "\n".join(f"{key:<{width}}  {value:.6g}" for key, value in sorted(metrics.items()))


def parse_task_list(values: Sequence[str]) -> tuple[str, ...]:
    """`--tasks a,b --tasks c` -> (a, b, c)."""
    return tuple(t.strip() for v in values for t in v.split(",") if t.strip())
