"""scripts/gpu_check.sh rehearsed on this CPU: the same parts and the same files, tiny sizes.

A GPU is lent now and then for minutes; a check script that breaks between leases costs a
lease. This runs the whole script as CI can (GPU_CHECK_REHEARSAL=1) and holds it to what
the device tool brings back: at most 8 files, the summary first, and a parity part that
runs the real `cem-ablate train`.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.data.conftest import isolated_cache  # noqa: F401  (session-wide autouse fixture)

REPO = Path(__file__).resolve().parents[2]
DEVICE_TOOL_FILE_LIMIT = 8
PARTS = ("bench 86M (profiled)", "train vs bench (cem-ablate train)", "bench 162M", "cuda tests", "kernels 86M eager")


@pytest.fixture(scope="module")
def check(tmp_path_factory, isolated_cache) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("out")
    work = tmp_path_factory.mktemp("work")
    env = dict(
        os.environ,
        OUT=str(out),
        GPU_CHECK_WORK=str(work),
        GPU_CHECK_REHEARSAL="1",
        CEM_ABLATE_CACHE=str(isolated_cache),
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    return out, done


def test_every_part_runs_and_at_most_eight_files_come_back(check):
    out, done = check
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= DEVICE_TOOL_FILE_LIMIT, files
    assert {
        "gpu-check.md",
        "logs.txt",
        "bench-86M.json",
        "parity.json",
        "bench-162M.json",
        "kernels.json",
        "traces.tar.gz",
    } <= set(files)
    with tarfile.open(out / "traces.tar.gz") as archive:  # the profiled cases' traces travel packed
        assert any(name.endswith(".trace.json") for name in archive.getnames())


def test_the_summary_comes_first_and_parity_ran_the_real_train_command(check):
    out, _ = check
    text = (out / "gpu-check.md").read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[:2] == ["## Summary", "## Parts"], sections
    summary = text.split("## Summary", 1)[1].split("## Parts", 1)[0]
    assert "`cem-ablate train`" in summary and "target >= 0.95" in summary
    assert "device profile: cpu (cpu), precision 32-true, AdamW single, clip norm 1" in summary
    for part in PARTS:
        assert f"| {part} | 0 |" in text, part
    logs = (out / "logs.txt").read_text()
    assert "cem_ablate.cli.main train" in logs  # the parity's training is the CLI, in its own process
