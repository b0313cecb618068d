"""`cem-ablate study / report / ui` at the command line: errors, dry run, help."""

import re
import subprocess
import sys
import time

import pytest
import yaml

from cem_ablate.cli.main import main
from cem_ablate.study.estimates import CPU_TRAIN_FLOPS_PER_S
from tests.study.tiny_study import write_study


def bad_study(tmp_path, change):
    path = write_study(tmp_path, name="bad")
    mapping = yaml.safe_load(path.read_text())
    change(mapping)
    path.write_text(yaml.safe_dump(mapping))
    return path


def _unknown_axis(m):
    m["axes"] = {"model.attention.heads": [2, 4]}


def _empty_grid(m):
    m["lr_search"]["grid"] = []


def _negative_lr(m):
    m["lr_search"]["grid"] = [1e-3, -1e-3]


def _one_rate(m):
    m["lr_search"]["grid"] = [2e-3]


def _unknown_component(m):
    m["variants"][1]["set"]["model.attention"] = "flash_cem"


def _statistics_typo(m):
    m["statistics"] = {"alpha": 0.05, "corection": "holm"}


def _statistics_alpha(m):
    m["statistics"] = {"alpha": 0.7}


@pytest.mark.parametrize(
    "change, expected",
    [
        (_unknown_axis, "axes.model.attention.heads: unknown key for attention 'llama' 'heads'"),
        (_empty_grid, "lr_search.grid: must hold at least one learning rate."),
        (_negative_lr, "lr_search.grid[1]: learning rates must be > 0, got -0.001."),
        (
            _one_rate,
            "lr_search.grid: one learning rate (0.002) estimates no lr*: list at least three rates, or set "
            "lr_search.fixed: true to compare the variants at this rate.",
        ),
        (_unknown_component, "variants[1].set.model.attention: unknown attention component 'flash_cem'"),
        (_statistics_typo, "statistics.corection: unknown key 'corection'. Did you mean 'correction'?"),
        (_statistics_alpha, "statistics.alpha: must be in (0, 0.5), got 0.7."),
    ],
)
def test_malformed_study_exits_with_one_line_and_touches_nothing(tmp_path, monkeypatch, capsys, change, expected):
    monkeypatch.chdir(tmp_path)
    path = bad_study(tmp_path, change)
    assert main(["study", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: {expected}"), err
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "reports").exists()


def test_malformed_study_as_a_real_process(tmp_path):
    path = bad_study(tmp_path, _negative_lr)
    storage = tmp_path / "elsewhere" / "optuna.db"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cem_ablate.cli.main",
            "study",
            str(path),
            "--workers",
            "2",
            "--storage",
            f"sqlite:///{storage}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {path}: lr_search.grid[1]: learning rates must be > 0, got -0.001."
    ]
    assert not storage.parent.exists() and not (tmp_path / "mlruns").exists()


def test_bad_options_are_one_line_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_study(tmp_path)
    assert main(["study", str(path), "--workers", "0"]) == 2
    assert capsys.readouterr().err == "error: --workers: must be at least 1, got 0.\n"
    assert main(["study", str(path), "--scale", "huge"]) == 2
    # this file has no `scale:`: say so, not "unknown scale 'huge'. Allowed: ."
    assert capsys.readouterr().err == (
        f"error: {path}: --scale: the study file defines no scales (no `scale:` mapping), so there is no 'huge'.\n"
    )
    assert main(["study", str(path), "--storage", "sqlite:///:memory:"]) == 2
    assert "workers cannot share it" in capsys.readouterr().err
    assert main(["study", str(path), "--dry-run", "--cpu-gflops", "0"]) == 2
    assert capsys.readouterr().err == "error: --cpu-gflops: must be > 0, got 0.0.\n"
    assert main(["study", str(path), "--dry-run", "--gpu-tflops", "-1"]) == 2
    assert capsys.readouterr().err == "error: --gpu-tflops: must be > 0, got -1.0.\n"
    assert not (tmp_path / "mlruns").exists()


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_study(tmp_path, grid=[5e-4, 1e-3, 2e-3], axes={"model.n_layers": [1, 2]})
    assert main(["study", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for text in (
        "llama,n_layers=1",
        "cem_attention,n_layers=2",
        "0.0005, 0.001, 0.002",
        "total: 12 trials",
        "GPU time",
    ):
        assert text in out
    assert not (tmp_path / "mlruns").exists()


def _cpu_hours(out: str) -> float:
    text = " ".join(out.split())
    return float(re.search(r"\(([0-9.e+-]+) CPU-hours on", text).group(1))


def test_dry_run_cpu_time_is_the_training_flops_at_the_given_rate(tmp_path, capsys):
    from cem_ablate.cli.study_command import load_expanded
    from cem_ablate.study.dry_run import plan

    # an empty storage: the repo's mlruns/ holds the quickstart's trials once the README's first command ran
    empty = ["--storage", f"sqlite:///{tmp_path / 'optuna.db'}"]
    assert main(["study", "studies/quickstart.yaml", "--dry-run", "--cpu-gflops", "50", *empty]) == 0
    out = capsys.readouterr().out
    rows = plan(load_expanded("studies/quickstart.yaml", None, []))
    flops = sum(r.trials * r.estimate.train_flops for r in rows)
    assert _cpu_hours(out) == pytest.approx(flops / 50e9 / 3600, rel=5e-3)  # printed to 3 significant digits
    assert "at 50 GFLOP/s (--cpu-gflops)" in " ".join(out.split())
    assert main(["study", "studies/quickstart.yaml", "--dry-run", *empty]) == 0  # default: the quickstart-measured rate
    assert not (tmp_path / "optuna.db").exists()  # a dry run creates no storage
    assert _cpu_hours(capsys.readouterr().out) == pytest.approx(flops / CPU_TRAIN_FLOPS_PER_S / 3600, rel=5e-3)


def test_quickstart_dry_run_counts_parameters(capsys):
    assert main(["study", "studies/quickstart.yaml", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "total: 15 trials" in out
    # CEM attention ties W_V = W_K and W_O = W_Q^T: fewer parameters than its Llama
    assert "0.88x" in out and "0.78x" in out


def test_report_of_an_unknown_study_and_store(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["report", "nosuch"]) == 2
    assert "no MLflow store at" in capsys.readouterr().err
    assert main(["ui"]) == 2
    assert "no MLflow store at" in capsys.readouterr().err
    assert not (tmp_path / "mlruns").exists()


def test_help_is_fast_and_does_not_import_heavy_modules():
    code = (
        "import sys; from cem_ablate.cli.main import main\n"
        "try:\n    main(['study', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert not {'torch', 'lightning', 'mlflow', 'optuna'} & set(sys.modules), sorted(sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "--workers" in proc.stdout and "--dry-run" in proc.stdout


@pytest.mark.slow
@pytest.mark.soak
def test_ui_serves_the_store_on_localhost_and_stops_cleanly(tmp_path):
    import json
    import os
    import signal
    import socket
    import urllib.request

    from cem_ablate.tracking.study_runs import StudyTracker, VariantRunInfo

    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    tracker = StudyTracker(uri, "shown")
    parent = tracker.create_variant_run(VariantRunInfo("v-1", "v", "variant", {"variant": "v"}, {}, {}))
    tracker.ensure_trial_run(parent, "v-1/lr=0.001", "v lr=0.001", {"lr": "0.001"})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cem_ablate.cli.main", "ui", "--port", str(port), "--study", "shown"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"MLflow UI: http://127.0.0.1:{port}/#/experiments/"), line
        assert "workflowType=machine_learning" in line
        # then one line per study: its plain experiment URL (tracking.ui_app opens it on the runs table)
        assert (
            proc.stdout.readline().strip() == f"shown: http://127.0.0.1:{port}/#/experiments/{tracker.experiment_id()}"
        )
        query = json.dumps({"experiment_ids": [tracker.experiment_id()]}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
            data=query,
            headers={"Content-Type": "application/json"},
        )
        runs = json.load(urllib.request.urlopen(request, timeout=10))["runs"]
        assert len(runs) == 2  # the parent and its child
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 60  # the group's last server processes exit after its leader
    with pytest.raises(OSError):  # the server's whole process group is gone
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)
            time.sleep(0.05)


def test_a_one_rate_grid_is_refused_by_the_dry_run_unless_it_says_fixed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = bad_study(tmp_path, _one_rate)
    assert main(["study", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lr_search.grid: one learning rate (0.002) estimates no lr*" in err
    assert main(["study", str(path), "--dry-run", "--set", "lr_search.fixed=true"]) == 0
    assert not (tmp_path / "mlruns").exists()
