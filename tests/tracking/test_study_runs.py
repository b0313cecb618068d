"""Writing a study to a real MLflow SQLite store in a tmp dir."""

import pytest

from cem_ablate.config.loading import flatten_dotted
from cem_ablate.tracking import tags as T
from cem_ablate.tracking.readback import read_study
from cem_ablate.tracking.study_runs import StudyTracker, VariantRunInfo


@pytest.fixture
def uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"


def info(key="cem-abc", name="cem", baselines=None):
    return VariantRunInfo(
        key=key,
        name=name,
        role="variant",
        labels={"variant": name, "model.size": "tiny"},
        baselines=baselines or {},
        params=flatten_dotted({"model": {"size": "tiny", "attention": {"name": "cem"}}}),
        metrics={"params_total": 1234, "flops_per_token": 5.0e4},
        study_yaml="name: s\n",
    )


def test_experiment_parent_and_child_are_found_not_duplicated(uri, tmp_path):
    tracker = StudyTracker(uri, "s")
    exp = tracker.experiment_id("a description", "h1")
    assert StudyTracker(uri, "s").experiment_id() == exp  # a second worker finds it
    experiment = tracker.client.get_experiment(exp)
    assert experiment.tags[T.NOTE] == "a description" and experiment.tags[T.STUDY_HASH] == "h1"
    assert experiment.artifact_location.startswith((tmp_path / "mlruns").as_uri())

    assert tracker.find_variant_run("cem-abc") is None
    parent = tracker.create_variant_run(info())
    assert tracker.find_variant_run("cem-abc") == parent
    run = tracker.client.get_run(parent)
    assert run.data.tags["model.size"] == "tiny" and run.data.params["model.size"] == "tiny"  # axis: tag + param
    assert run.data.params["model.attention.name"] == "cem"
    assert run.data.metrics["params_total"] == 1234
    assert [a.path for a in tracker.client.list_artifacts(parent)] == ["study.yaml"]

    child = tracker.ensure_trial_run(parent, "cem-abc/lr=0.001,seed=0", "cem lr=0.001", {"lr": "0.001", "seed": "0"})
    again = tracker.ensure_trial_run(parent, "cem-abc/lr=0.001,seed=0", "cem lr=0.001", {"lr": "0.001", "seed": "0"})
    assert child == again  # a retried trial reuses its child run
    assert tracker.client.get_run(child).data.tags[T.PARENT] == parent


def test_readback_returns_what_the_report_reads(uri, tmp_path):
    tracker = StudyTracker(uri, "s")
    base = tracker.create_variant_run(info("llama-1", "llama"))
    cem = tracker.create_variant_run(info("cem-1", "cem", baselines={"llama": "llama-1"}))
    for parent, key in ((base, "llama-1"), (cem, "cem-1")):
        for lr, status, ppl in ((1e-3, "finished", 30.0), (2e-3, "finished", 28.0), (8e-3, "diverged", None)):
            child = tracker.ensure_trial_run(parent, f"{key}/lr={lr}", f"lr={lr}", {"lr": repr(lr), "seed": "0"})
            tracker.log_trial_outcome(child, status, "loss not finite" if ppl is None else "", {"test_ppl": ppl})
        plot = tmp_path / "akima.png"
        plot.write_bytes(b"png")
        tracker.log_variant_summary(
            parent,
            {"lr_akima": 2e-3, "ppl_akima": 27.5 if key == "cem-1" else 28.0},
            {T.AKIMA_EDGE: "high", T.PROGRESS: "done"},
            str(plot),
            done=True,
        )

    records = {r.name: r for r in read_study(uri, "s")}
    assert set(records) == {"llama", "cem"}
    cem_rec = records["cem"]
    assert cem_rec.baselines == {"llama": "llama-1"}
    assert (cem_rec.lr_star, cem_rec.ppl_star, cem_rec.edge, cem_rec.params_total) == (2e-3, 27.5, "high", 1234)
    assert cem_rec.labels == {"variant": "cem", "model.size": "tiny"}
    assert [(t.lr, t.status, t.value) for t in cem_rec.trials] == [
        (1e-3, "finished", 30.0),
        (2e-3, "finished", 28.0),
        (8e-3, "diverged", None),
    ]
    assert cem_rec.trials[2].reason == "loss not finite"
    assert tracker.client.get_run(cem).info.status == "FINISHED"
    assert sorted(a.path for a in tracker.client.list_artifacts(cem)) == ["akima.png", "study.yaml"]
    assert [r.name for r in read_study(uri, "s", variant_keys=["cem-1"])] == ["cem"]
    with pytest.raises(LookupError):
        read_study(uri, "other")
