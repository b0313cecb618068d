"""The architecture page's layer table (docs/architecture.md) is the import-linter
contract `.importlinter`, and the code keeps it (layers, a leaf `tracking`, the zoo
only through the registry, MLflow only in tracking, Optuna only in study, no import
cycles in any package).

Also checked here, because import-linter cannot: every package of the core is a
regular package (a namespace package is invisible to it, so its imports would go
unchecked) and is placed by a contract, and the page's table lists exactly the
contract's layers, in order.
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"
LINT = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*LINT, "--config", str(root / ".importlinter"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _contracts() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    return parser


def _lines(value: str) -> list[str]:
    return [line.strip() for line in value.strip().splitlines() if line.strip()]


def _layers() -> list[tuple[str, bool]]:
    """(layer, optional) top to bottom; `a | b` gives both, in order."""
    out = []
    for line in _lines(_contracts()["importlinter:contract:layers"]["layers"]):
        for name in line.split("|"):
            name = name.strip()
            out.append((name.strip("()"), name.startswith("(")))
    return out


def test_the_code_keeps_every_contract():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"Contracts: \d+ kept, 0 broken", result.stdout)


def test_the_contracts_catch_violations(tmp_path):
    """Each kind of violation, planted in a copy of the code, breaks its contract."""
    for package in ("cem_ablate", "components"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CONFIG, tmp_path / ".importlinter")
    plant = {
        "cem_ablate/model/report.py": "import mlflow",  # MLflow outside tracking (and in model)
        "cem_ablate/training/budget.py": "import components.alibi",  # the core importing the zoo
        "cem_ablate/model/blocks.py": "import cem_ablate.model.assembly",  # a cycle inside model
        "cem_ablate/analysis/akima.py": "import cem_ablate.study.spec",  # a lower layer importing a higher
        "cem_ablate/tracking/tags.py": "import cem_ablate.model",  # the leaf importing the stack
        "components/alibi.py": "import cem_ablate.training.budget",  # the zoo importing training
        "cem_ablate/data/config.py": "import optuna",  # Optuna outside study
    }
    for path, line in plant.items():
        with open(tmp_path / path, "a") as f:
            f.write(f"\n{line}\n")
    out = _lint(tmp_path).stdout
    contracts = _contracts()
    names = {
        section.split(":")[-1]: " ".join(contracts[section]["name"].split())
        for section in contracts.sections()
        if section.startswith("importlinter:contract:")
    }
    joined = " ".join(out.split())
    for key in (
        "layers",
        "core-without-zoo",
        "mlflow-only-in-tracking",
        "no-cycles",
        "tracking-leaf",
        "zoo-on-the-core",
        "optuna-only-in-study",
        "model-and-zoo-framework-free",
        "analysis-pure",
    ):
        assert f"{names[key]} BROKEN" in joined, (key, out[-3000:])


def test_every_core_package_is_regular_and_placed():
    contracts = _contracts()
    placed = {name for name, _ in _layers()}
    placed |= {m.split(".")[1] for m in _lines(contracts["importlinter:contract:tracking-leaf"]["source_modules"])}
    for child in sorted((ROOT / "cem_ablate").iterdir()):
        if child.is_dir() and any(child.glob("*.py")):
            assert (child / "__init__.py").exists(), f"{child.name}/ is a namespace package: import-linter skips it"
            assert child.name in placed, f"cem_ablate.{child.name} is in no contract (.importlinter)"
        elif child.suffix == ".py" and child.stem != "__init__":
            assert child.stem in placed, f"cem_ablate.{child.stem} is in no contract (.importlinter)"


def test_architecture_table_is_the_contract():
    """The layer table of docs/architecture.md lists the contract's layers top to bottom
    (an optional layer once its package exists), then tracking and the zoo."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    names = [re.findall(r"`([\w/]+)`", row.split("|")[1]) for row in rows]
    listed = [name.rstrip("/") for cell in names for name in cell]
    expected = [name for name, optional in _layers() if not optional or (ROOT / "cem_ablate" / name).is_dir()]
    assert listed == [*expected, "tracking", "components"]
