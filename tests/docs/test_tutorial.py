"""docs/tutorial.md, executed: its files written and its commands run, in order, in an
empty folder, exactly as printed (no copy of them here that could drift).

The page's code blocks are of four kinds:
- a fence with `title="path"`: a file, written to that path before anything runs;
- ```bash: commands, all blocks joined into one script run by bash with `set -e`;
- ```console: a command shown but not run; only `cem-ablate ui` (a server that runs
  until stopped), whose page is checked here through the MLflow store instead;
- ```text: what a command prints; the lines shown must be what it printed.

The run happens as a newcomer's would, with the environment kept apart from the
machine's: `pip install` goes into a temporary folder (PIP_TARGET) on PYTHONPATH, never
into site-packages, and downloads nothing (PIP_NO_INDEX); pip's wheel cache, the token
cache, the Hugging Face caches (remote code included) and every store live in the
temporary folder; `python`, `pip` and
`cem-ablate` run on this interpreter with this checkout first on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tutorial.md"
STUDY = "first_ablation"
VERDICTS = ("better", "worse", "unresolved")
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = ["cem-ablate ui"]  # the console blocks' commands: a server, checked through its store


@dataclass(frozen=True)
class Block:
    language: str
    title: str | None
    code: str


def page_blocks() -> list[Block]:
    blocks = []
    for language, attributes, code in FENCE.findall(PAGE.read_text()):
        title = re.search(r'title="([^"]+)"', attributes)
        blocks.append(Block(language, title.group(1) if title else None, code))
    return blocks


def page_files() -> dict[str, str]:
    return {b.title: b.code for b in page_blocks() if b.title}


def page_script() -> str:
    return "".join(b.code for b in page_blocks() if b.language == "bash" and not b.title)


def printed_sample(marker: str) -> str:
    """The page's one ```text block (what a command prints) that contains `marker`."""
    [sample] = [b.code for b in page_blocks() if b.language == "text" and not b.title and marker in b.code]
    return sample


def test_every_code_block_is_a_file_a_command_or_output():
    """Nothing on the page is code that the executed test skips."""
    blocks = page_blocks()
    assert blocks, "no code blocks found in docs/tutorial.md"
    for block in blocks:
        if block.title:
            assert not Path(block.title).is_absolute() and ".." not in Path(block.title).parts, block.title
        else:
            assert block.language in ("bash", "console", "text"), (
                f'a ```{block.language} block without title="path": it would be neither written nor run'
            )
    shown = [
        line[2:].strip()
        for b in blocks
        if b.language == "console"
        for line in b.code.splitlines()
        if line.startswith("$ ")
    ]
    assert shown == NOT_RUN, "only `cem-ablate ui` may be shown without being run"
    files = page_files()
    assert {
        "my-gelu-mlp/pyproject.toml",
        "my-gelu-mlp/gelu_mlp.py",
        f"{STUDY}.yaml",
        "my-sigmoid-attention/pyproject.toml",
        "my-sigmoid-attention/sigmoid_attention.py",
    } <= set(files)
    for command in (
        "pip install",
        "cem-ablate study",
        "cem-ablate report",
        "cem-ablate export",
        "cem-ablate eval",
        "cem-ablate components --check sigmoid",
    ):
        assert command in page_script(), f"the page runs no `{command}`"


def _wrappers(folder: Path) -> Path:
    """`python`, `pip` and `cem-ablate` on this interpreter (the page's commands, typed as is)."""
    folder.mkdir()
    for name, module in (("python", None), ("pip", "pip"), ("cem-ablate", "cem_ablate.cli.main")):
        run = f'exec "{sys.executable}"' + (f" -m {module}" if module else "") + ' "$@"\n'
        (folder / name).write_text("#!/usr/bin/env bash\n" + run)
        (folder / name).chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    """(the folder the page ran in, everything it printed)."""
    pytest.importorskip("lm_eval")
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("tutorial")
    work, site = root / "work", root / "site"
    work.mkdir()
    for path, code in page_files().items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(code)
    (root / "run.sh").write_text("set -euo pipefail\nset -x\n" + page_script())
    env = {
        **os.environ,
        "PATH": f"{_wrappers(root / 'bin')}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": f"{site}{os.pathsep}{ROOT}",  # the plugin, then this checkout's cem_ablate
        "PIP_TARGET": str(site),
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_CACHE_DIR": str(root / "pip-cache"),  # the plugin's wheel, built once, stays here too
        "CEM_ABLATE_CACHE": str(root / "cache"),
        "HF_HOME": str(root / "hf"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PS4": "$ ",
    }
    env.pop("PYTHONHOME", None)
    done = subprocess.run(
        ["bash", str(root / "run.sh")],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-6000:]
    return work, done.stdout


@pytest.mark.slow
@pytest.mark.soak  # the tutorial run end to end (~110 s, one module fixture); in CI its page's blocks: test_every_code_block_is_a_file_a_command_or_output
def test_plugin_is_listed_and_installed_only_in_the_temporary_folder(tutorial):
    _, output = tutorial
    assert "[plugin gelu_mlp (gelu_mlp)]" in output
    listing = printed_sample("[plugin gelu_mlp")
    for line in listing.splitlines():
        assert line.rstrip() in output, f"the page shows a line the listing did not print: {line!r}"
    alone = subprocess.run(
        [sys.executable, "-c", "import gelu_mlp"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        cwd=ROOT,
    )
    assert alone.returncode != 0, "the tutorial's plugin was installed outside its temporary folder"


@pytest.mark.slow
@pytest.mark.soak  # the tutorial run end to end (~110 s, one module fixture); in CI its page's blocks: test_every_code_block_is_a_file_a_command_or_output
def test_dry_run_shows_matched_parameters(tutorial):
    _, output = tutorial
    assert "study first_ablation: 2 variants (dry run: nothing started)" in output
    assert "total: 18 trials" in output
    assert output.count("133,568") >= 2  # the page's claim: both variants have this many parameters


def _report_verdict(report: str) -> str:
    row = re.search(r"^\| gelu \| llama \| baseline lr\* \(lr [0-9.e-]+\) \|.*\| (\w+) \|$", report, re.M)
    assert row, "the report has no row gelu vs llama at the baseline's lr*"
    return row.group(1)


@pytest.mark.slow
@pytest.mark.soak  # the tutorial run end to end (~110 s, one module fixture); in CI its page's blocks: test_every_code_block_is_a_file_a_command_or_output
def test_report_has_both_variants_and_the_verdict(tutorial):
    work, _ = tutorial
    report = (work / "reports" / STUDY / "report.md").read_text()
    assert "| llama (baseline) |" in report and "| gelu |" in report
    assert "9/9 finished" in report
    assert _report_verdict(report) in VERDICTS
    sample = printed_sample("| vs baseline |")
    assert sample.splitlines()[0] in report.splitlines(), "the page's report excerpt has other columns"
    assert (work / "reports" / STUDY / "ppl_vs_lr.png").is_file()


@pytest.mark.slow
@pytest.mark.soak  # the tutorial run end to end (~110 s, one module fixture); in CI its page's blocks: test_every_code_block_is_a_file_a_command_or_output
def test_mlflow_holds_what_the_ui_page_shows(tutorial):
    from mlflow import MlflowClient

    work, output = tutorial
    client = MlflowClient(f"sqlite:///{work / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(STUDY).experiment_id
    parents = {
        r.data.tags["cem_ablate.variant"]: r
        for r in client.search_runs([experiment], "tags.cem_ablate.kind = 'variant'")
    }
    assert set(parents) == {"gelu", "llama"}
    trials = client.search_runs([experiment], "tags.cem_ablate.kind = 'trial'")
    assert len(trials) == 18 and {t.data.tags["cem_ablate.status"] for t in trials} == {"finished"}
    gelu = parents["gelu"].data
    for metric in ("Δ llama", "Holm p llama", "ppl opt", "lr opt", "objective_star", "lr_star"):
        assert metric in gelu.metrics, metric
    assert "CI llama" in gelu.tags
    verdict = gelu.tags["cem_ablate.verdict.llama"]
    assert (
        gelu.tags["verdict llama"] == verdict == _report_verdict((work / "reports" / STUDY / "report.md").read_text())
    )
    assert f"verdict vs llama: {verdict}" in output  # what winner.py printed


@pytest.mark.slow
@pytest.mark.soak  # the tutorial run end to end (~110 s, one module fixture); in CI its page's blocks: test_every_code_block_is_a_file_a_command_or_output
def test_winner_is_exported_and_scored(tutorial):
    from mlflow import MlflowClient

    work, output = tutorial
    folder = work / (work / "winner.txt").read_text()
    assert folder.parent.parent == work / "mlruns" / "studies" / STUDY
    assert (folder / "checkpoints" / "last.ckpt").is_file()
    config = json.loads((work / "hf-winner" / "config.json").read_text())
    assert config["vocab_size"] > 0
    assert (work / "hf-winner" / "model.safetensors").stat().st_size > 100_000  # 133,568 float32 weights
    if folder.parent.name.startswith("gelu-"):
        assert (work / "hf-winner" / "gelu_mlp.py").is_file()  # the plugin travels with its model
    assert "def main():" in output  # use_winner.py generated from its prompt

    printed = re.search(r"^eval/python_next_token/acc\s+([0-9.]+)$", output, re.M)
    assert printed, "cem-ablate eval printed no accuracy"
    accuracy = float(printed.group(1))
    assert accuracy in (0.0, 0.25, 0.5, 0.75, 1.0)  # four documents
    run_id = json.loads((folder / "mlflow.json").read_text())["run_id"]
    logged = MlflowClient(f"sqlite:///{work / 'mlruns' / 'mlflow.db'}").get_run(run_id).data.metrics
    assert logged["eval/python_next_token/acc"] == pytest.approx(accuracy)


@pytest.mark.slow
@pytest.mark.soak  # the tutorial run end to end (~110 s, one module fixture); in CI its page's blocks: test_every_code_block_is_a_file_a_command_or_output
def test_the_attention_part_passes_the_contract_check(tutorial):
    _, output = tutorial
    [line] = printed_sample("ok: attention 'sigmoid'").splitlines()
    assert line in output.splitlines()
    assert "error: attention" not in output
