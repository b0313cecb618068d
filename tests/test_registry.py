import subprocess
import sys
import textwrap

import pytest

from cem_ablate import registry


def test_every_design_space_component_is_registered():
    assert set(registry.names("attention")) >= {"llama", "cem"}
    assert set(registry.names("mlp")) >= {"llama", "cem", "cem_param_matched"}
    assert set(registry.names("preconditioner")) >= {"identity", "diag", "diag_lowrank"}
    assert set(registry.names("positional")) == set()  # building blocks, not registered (never looked up)


def test_listing_shows_kinds_names_options_and_defaults():
    text = registry.format_listing()
    for fragment in [
        "attention:",
        "mlp:",
        "preconditioner:",
        "cem",
        "kq_diag = 'none'",
        "diag_update = 'paper'",
        "width_multiplier = 1.5",
    ]:
        assert fragment in text, fragment


def test_cli_components_lists_them():
    out = subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", "components"], capture_output=True, text=True, check=True
    ).stdout
    assert "diag_lowrank" in out and "cem_param_matched" in out


PLUGIN = '''
"""A third-party attention: CEM attention with a fixed step size of 0.5."""
from dataclasses import dataclass
from cem_ablate.registry import register
from components.cem_attention import CEMAttention, CEMAttentionOptions

@dataclass(frozen=True)
class HalfStepOptions(CEMAttentionOptions):
    step_size: float = 0.5
    temperature: float = 1.0

register("attention", "half_step_cem", options=HalfStepOptions,
         description="CEM attention with half steps (test plugin).")(CEMAttention)
'''


def test_plugin_registers_through_entry_point(tmp_path):
    """A package installed with an entry point in `cem_ablate.components` plugs in
    without editing cem-ablate: it shows in the listing and builds in a model."""
    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "my_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[cem_ablate.components]\nhalf_step = my_plugin\n")
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[1])
        from cem_ablate import build_model, registry
        assert "half_step_cem" in registry.format_listing()
        m = build_model({"d_model": 16, "n_layers": 1, "n_heads": 2, "d_mlp": 32, "vocab_size": 7,
                         "attention": {"name": "half_step_cem", "temperature": 2.0}})
        print(type(m.blocks[0].attention).__name__, m.blocks[0].attention.step_size)
    """)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["CEMAttention", "0.5"]


def test_no_plugin_fails_in_this_installation():
    """The zoo and every installed plugin load (a failure would only warn elsewhere)."""
    assert registry.failures() == []


def test_unknown_names_get_a_suggestion_and_the_key_path():
    from cem_ablate.config.errors import ConfigError

    try:
        registry.get("attention", "cme", "model.attention.name")
    except ConfigError as err:
        assert err.path == "model.attention.name" and "Did you mean 'cem'?" in str(err)
    else:
        raise AssertionError("no ConfigError")


def test_missing_lists_the_components_looked_up_and_not_found():
    """What `cem-ablate report` reads to tell a missing plugin's component from any other
    error in a study file (it counts only lookups made while it reads the file)."""
    from cem_ablate import build_model
    from cem_ablate.config.errors import ConfigError

    before = len(registry.missing())
    with pytest.raises(ConfigError):
        build_model({"size": "tiny", "mlp": "no_such_mlp_anywhere"})
    assert registry.missing()[before:] == ["mlp component 'no_such_mlp_anywhere' (no installed plugin registers it)"]
    build_model({"size": "tiny", "mlp": "llama"})  # found: nothing added
    assert len(registry.missing()) == before + 1
