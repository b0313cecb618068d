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


def test_key_value_overrides_may_follow_options(tmp_path, capsys):
    """`cem-ablate coord-check CONFIG --widths 32,64 model.x=y`: the override after an option is
    read as an override (here a bad one: the config's one error line names it), not refused by
    argparse as an unrecognized argument."""
    from cem_ablate.cli.main import main

    config = tmp_path / "c.yaml"
    config.write_text("model: {d_model: 32, n_layers: 1, n_heads: 2, d_mlp: 88, max_seq_len: 32}\n")
    assert main(["coord-check", str(config), "--widths", "32,64", "model.parametrization=mu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: model.parametrization"), err
