"""`cem-ablate --version`: the version the trial keys hold (cem_ablate.__version__), which is
also the installed distribution's (pyproject reads it)."""

import subprocess
import sys
from importlib.metadata import version

import cem_ablate


def test_version_is_the_packages_and_the_distributions():
    done = subprocess.run([sys.executable, "-m", "cem_ablate.cli.main", "--version"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cem-ablate {cem_ablate.__version__}"
    assert version("cem-ablate") == cem_ablate.__version__
