"""lm-evaluation-harness on an exported trained tiny CEM run, offline, on two local
tasks: its log-likelihoods are the platform's own (1e-5), its metrics follow from
them, the CLI prints them and logs them to the run's MLflow run; unknown and
offline-Hub tasks are one error line."""

import math
import re

import pytest
from mlflow import MlflowClient

from cem_ablate.cli.main import main
from cem_ablate.config import ConfigError
from cem_ablate.evaluation.harness import EvalSpec, flatten_results, load_tasks, run_harness
from cem_ablate.evaluation.scoring import continuation_loglik, rolling_loglik
from cem_ablate.training.trained_run import load_trained_run
from tests.evaluation.local_tasks import MC_DOCS, PPL_DOCS, write_tasks
from tests.export.conftest import isolated_cache, trained_run  # noqa: F401  (session fixtures)

pytest.importorskip("lm_eval")


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory):
    return write_tasks(tmp_path_factory.mktemp("tasks"))


def _harness_split(context: str, continuation: str) -> tuple[str, str]:
    """HFLM scores `context` + `continuation` with the context's trailing whitespace
    moved to the continuation (lm_eval.models.huggingface._encode_pair)."""
    n = len(context) - len(context.rstrip())
    return (context[:-n], context[-n:] + continuation) if n else (context, continuation)


def test_loglikelihoods_are_the_platforms(trained_run, tasks_dir):
    run_dir, _, _ = trained_run
    trained = load_trained_run(run_dir)
    spec = EvalSpec(("cem_mc", "cem_ppl"), include_path=str(tasks_dir))
    output = run_harness(trained, spec, log_samples=True)

    mc = output["samples"]["cem_mc"]
    assert len(mc) == len(MC_DOCS)
    correct = 0
    for sample in mc:
        ours = [
            continuation_loglik(trained.model, trained.tokenizer, *_harness_split(*args))
            for args in sample["arguments"]
        ]
        theirs = [resp[0][0] for resp in sample["resps"]]
        assert len(ours) == len(sample["doc"]["choices"])
        assert max(abs(a - b) for a, b in zip(ours, theirs)) <= 1e-5
        correct += max(range(len(ours)), key=ours.__getitem__) == sample["doc"]["answer"]

    ppl = output["samples"]["cem_ppl"]
    total, words = 0.0, 0
    for sample in ppl:
        ours = rolling_loglik(trained.model, trained.tokenizer, sample["doc"]["text"], trained.tokenizer.eos_id)
        assert abs(ours - sample["resps"][0][0]) <= 1e-5
        total += ours
        words += len(re.split(r"\s+", sample["doc"]["text"]))  # the harness's word count (ConfigurableTask.count_words)
    assert len(ppl) == len(PPL_DOCS)

    metrics = flatten_results(output["results"])
    assert metrics["eval/cem_mc/acc"] == pytest.approx(correct / len(MC_DOCS))
    assert metrics["eval/cem_ppl/word_perplexity"] == pytest.approx(math.exp(-total / words), rel=1e-6)


def test_cli_prints_and_logs_to_the_runs_mlflow_run(trained_run, tasks_dir, capsys):
    run_dir, uri, result = trained_run
    assert main(["eval", str(run_dir), "--tasks", "cem_mc", "--include-path", str(tasks_dir), "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "eval/cem_mc/acc" in out and result.mlflow_run_id in out
    logged = MlflowClient(uri).get_run(result.mlflow_run_id).data.metrics
    printed = float(next(line for line in out.splitlines() if line.startswith("eval/cem_mc/acc")).split()[-1])
    assert logged["eval/cem_mc/acc"] == pytest.approx(printed, abs=1e-6) and printed in (0.0, 0.5, 1.0)


def test_unknown_and_offline_tasks_are_one_error(trained_run, capsys, monkeypatch):
    with pytest.raises(ConfigError, match="unknown lm-evaluation-harness task 'hellaswagg'.*hellaswag"):
        load_tasks(EvalSpec(("hellaswagg",)))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="task 'hellaswag' cannot load its data.*offline"):
        load_tasks(EvalSpec(("hellaswag",)))
    run_dir, _, _ = trained_run
    assert main(["eval", str(run_dir), "--tasks", "no_such_task"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: eval.tasks: unknown lm-evaluation-harness task")
