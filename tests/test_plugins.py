"""Plugins installed from outside the repository, as `pip install` leaves them: a
module plus a `*.dist-info` with an entry point in `cem_ablate.components`, in a temp
site folder put on PYTHONPATH (nothing is left behind). The CLI runs as a subprocess.

- The plugin example of docs/reference/components.md (read from the page, so the two
  cannot drift) is listed by `cem-ablate components`, built by `build_model` and trained.
- A plugin that fails to import, or breaks the component contract, costs only its own
  components: one warning line, the listing and a built-in study still work, and a
  config naming its components gets one `error:` line naming the plugin and entry point.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _documented_files() -> dict[str, str]:
    """The files of docs/reference/components.md's section "A complete plugin package",
    verbatim: every code block whose first line names its path (`# my-mlp/pyproject.toml`,
    `# squared_relu.yaml: ...`)."""
    page = (ROOT / "docs" / "reference" / "components.md").read_text()
    section = page.split("## A complete plugin package", 1)[1].split("\n## ", 1)[0]
    files = {}
    for code in re.findall(r"```\w+\n(.*?)```", section, re.S):
        named = re.match(r"# ([\w./-]+\.(?:py|toml|yaml))\b", code)
        if named:
            files[named.group(1)] = code
    return files


def _documented_plugin() -> tuple[str, dict[str, str]]:
    """The documented plugin module and its entry points (docs/reference/components.md)."""
    files = _documented_files()
    toml = tomllib.loads(files["my-mlp/pyproject.toml"])
    return files["my-mlp/my_mlp.py"], toml["project"]["entry-points"]["cem_ablate.components"]


def _install(site: Path, distribution: str, modules: dict[str, str], entry_points: dict[str, str]) -> None:
    """Write modules and a dist-info into `site`, as pip would for `distribution`."""
    site.mkdir(parents=True, exist_ok=True)
    for name, code in modules.items():
        (site / f"{name}.py").write_text(code)
    info = site / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[cem_ablate.components]\n{lines}")


def _run(args: list[str], site: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _cli(args: list[str], site: Path) -> subprocess.CompletedProcess:
    return _run(["-m", "cem_ablate.cli.main", *args], site)


def _plugin_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: plugin")]


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_documented_plugin_is_listed_built_and_trained(tmp_path):
    module, entry_points = _documented_plugin()
    _install(tmp_path, "my-mlp", {"my_mlp": module}, entry_points)
    listing = _cli(["components", "--kind", "mlp"], tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert _plugin_warnings(listing.stderr) == []
    assert "squared_relu" in listing.stdout and "width_multiplier = 1.0" in listing.stdout
    assert "[plugin my_components (my_mlp)]" in listing.stdout

    script = textwrap.dedent("""
        import torch
        from cem_ablate import build_model
        from cem_ablate.config.errors import ConfigError
        from cem_ablate.model import model_report

        dims = {"d_model": 16, "n_layers": 2, "n_heads": 2, "d_mlp": 24, "vocab_size": 11, "max_seq_len": 8}
        torch.manual_seed(0)
        model = build_model({**dims, "mlp": {"name": "squared_relu", "width_multiplier": 2.0}})
        mlp = model.blocks[0].mlp
        report = model_report(model, seq_len=8)
        ids = torch.randint(0, 11, (4, 9))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(20):
            logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), ids[:, 1:].reshape(-1))
            opt.zero_grad(); loss.backward(); opt.step()
            losses.append(loss.item())
        try:
            build_model({**dims, "mlp": {"name": "squared_relu", "width_multiplier": -1.0}})
        except ConfigError as err:
            error = err.path
        print(type(mlp).__name__, mlp.up.out_features, report.flops_by_module["blocks.0.mlp"],
              report.params_by_component["mlp"], losses[0] > 1.2 * losses[-1], error)
    """)
    out = _run(["-c", script], tmp_path)
    assert out.returncode == 0, out.stderr
    name, hidden, flops, params, learned, error_path = out.stdout.split()
    assert (name, int(hidden)) == ("SquaredReLUMLP", 48)
    assert float(flops) == 4 * 16 * 48
    assert int(params) == 2 * 2 * 16 * 48  # two layers of up and down; the norm gains count as norms
    assert learned == "True"
    assert error_path == "model.mlp.width_multiplier"


BROKEN = "import missing_dependency_of_the_plugin  # not installed\n"
BROKEN_WARNING = (
    "warning: plugin 'broken' (entry point broken_plugin) failed to load: ModuleNotFoundError: "
    "No module named 'missing_dependency_of_the_plugin'; its components are unavailable"
)


def test_plugin_that_fails_to_import_costs_only_its_components(tmp_path):
    site = tmp_path / "site"
    _install(site, "broken-plugin", {"broken_plugin": BROKEN}, {"broken": "broken_plugin"})

    listing = _cli(["components"], site)
    assert listing.returncode == 0, listing.stderr
    assert _plugin_warnings(listing.stderr) == [BROKEN_WARNING]
    assert "cem_param_matched" in listing.stdout and "diag_lowrank" in listing.stdout

    quickstart = _cli(["study", "studies/quickstart.yaml", "--dry-run"], site)
    assert quickstart.returncode == 0, quickstart.stderr
    assert _plugin_warnings(quickstart.stderr) == [BROKEN_WARNING]
    assert "15 trials" in quickstart.stdout and "Traceback" not in quickstart.stderr

    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    study["variants"] = [{"name": "mine", "set": {"model.attention": {"name": "my_attention"}}}]
    study.pop("baselines", None)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(study))
    named = _cli(["study", str(path), "--dry-run"], site)
    assert named.returncode != 0
    assert "Traceback" not in named.stderr
    [error] = _errors(named.stderr)
    assert "'my_attention'" in error and "plugin 'broken' (entry point broken_plugin) failed to load" in error


CONTRACT_BREAKERS = {
    "no_flops_plugin": textwrap.dedent("""
        from torch import nn
        from cem_ablate.registry import register

        @register("attention", "no_flops", description="forgets flops_per_token")
        class NoFlops(nn.Module):
            def __init__(self, dims, options, steps=1):
                super().__init__()

            def forward(self, h):
                return h
    """),
    "dict_options_plugin": textwrap.dedent("""
        from cem_ablate.registry import register

        @register("mlp", "dict_options", options=dict, description="options are not a dataclass")
        def build(dims, options, steps=1):
            raise AssertionError("never built")
    """),
}


def test_plugins_that_break_the_contract_cost_only_their_components(tmp_path):
    _install(
        tmp_path, "bad-plugins", CONTRACT_BREAKERS, {"noflops": "no_flops_plugin", "dictopts": "dict_options_plugin"}
    )
    listing = _cli(["components"], tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert _plugin_warnings(listing.stderr) == [
        "warning: plugin 'dictopts' (entry point dict_options_plugin) failed to load: ContractError: mlp component "
        "'dict_options': options=<class 'dict'> is not a dataclass type; its components are unavailable",
        "warning: plugin 'noflops' (entry point no_flops_plugin) failed to load: ContractError: attention "
        "component 'no_flops': NoFlops defines no flops_per_token; its components are unavailable",
    ]
    assert "no_flops" not in listing.stdout and "dict_options" not in listing.stdout
    assert "cem_param_matched" in listing.stdout

    train = _cli(["train", "--help"], tmp_path)  # a command that needs no component at all
    assert train.returncode == 0

    script = textwrap.dedent("""
        from cem_ablate import build_model
        from cem_ablate.config.errors import ConfigError
        try:
            build_model({"size": "tiny", "attention": "no_flops"})
        except ConfigError as err:
            print(err)
    """)
    out = _run(["-c", script], tmp_path)
    assert out.stdout.strip() == (
        "model.attention.name: attention component 'no_flops' is unavailable: plugin 'noflops' (entry point "
        "no_flops_plugin) failed to load: ContractError: attention component 'no_flops': NoFlops defines no "
        "flops_per_token."
    )


@pytest.mark.soak
def test_documented_plugin_package_installs_with_pip_and_trains_the_documented_study(tmp_path):
    """The documented package (pyproject and module) and study file, copied verbatim, in a
    fresh virtual environment on this interpreter's packages (cem-ablate, torch: nothing
    downloaded): `pip install -e`, listed, and the study trained at its smoke scale."""
    files = _documented_files()
    assert {"my-mlp/pyproject.toml", "my-mlp/my_mlp.py", "squared_relu.yaml"} <= set(files)
    assert all("..." not in code for code in files.values())  # complete, not abbreviated
    for path, code in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(code)
    venv = tmp_path / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    # this checkout's cem_ablate and components, whatever the interpreter has installed
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PIP_NO_INDEX": "1"}
    env.pop("PYTHONHOME", None)

    def run(*args, cwd=tmp_path):
        return subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)

    install = run("-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", "./my-mlp")
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    assert not (ROOT / "my_mlp.py").exists()
    listing = run("-m", "cem_ablate.cli.main", "components", "--kind", "mlp")
    assert listing.returncode == 0, listing.stderr
    assert "[plugin my_components (my_mlp)]" in listing.stdout and _plugin_warnings(listing.stderr) == []
    where = run("-c", "import my_mlp, importlib.metadata as m; print(my_mlp.__file__, m.version('my-mlp'))")
    assert where.stdout.split() == [str(tmp_path / "my-mlp" / "my_mlp.py"), "0.1.0"]  # editable, from its folder

    study = run(
        "-m",
        "cem_ablate.cli.main",
        "study",
        "squared_relu.yaml",
        "--scale",
        "smoke",
        "--threads",
        "1",
        "--workers",
        "1",
    )
    assert study.returncode == 0, study.stdout[-3000:] + study.stderr[-3000:]
    from cem_ablate.tracking.readback import read_study

    records = {r.name: r for r in read_study(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", "squared_relu_smoke")}
    assert set(records) == {"llama", "squared_relu"}
    assert [t.status for r in records.values() for t in r.trials] == ["finished", "finished"]
    assert records["squared_relu"].params_total != records["llama"].params_total  # its own MLP was built
    assert "squared_relu" in (tmp_path / "reports" / "squared_relu_smoke" / "report.md").read_text()
