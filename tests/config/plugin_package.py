"""A tiny MLP plugin installed into a temp site folder: a package of two modules
(the registered MLP imports its activation) with a dist-info whose entry point is in
`cem_ablate.components`, as `pip install` would leave it. Editing the activation
(GELU -> tanh-GELU) is the edit a user makes to their plugin."""

from __future__ import annotations

import textwrap
from pathlib import Path

MLP_NAME = "gelu_test"
DISTRIBUTION = "gelu-plugin"

MLP_MODULE = textwrap.dedent('''
    """A GELU MLP (test plugin): h + down(act(up(norm(h))))."""
    from dataclasses import dataclass

    from torch import nn

    from cem_ablate.registry import register
    from gelu_plugin.activation import act


    @dataclass(frozen=True)
    class GeluOptions:
        pass


    @register("mlp", "gelu_test", options=GeluOptions, description="GELU MLP (test plugin).")
    class GeluMLP(nn.Module):
        def __init__(self, dims, options, steps=1):
            super().__init__()
            self.norm = nn.RMSNorm(dims.d_model, eps=dims.norm_eps)
            self.up = nn.Linear(dims.d_model, dims.d_mlp, bias=False)
            self.down = nn.Linear(dims.d_mlp, dims.d_model, bias=False)

        def forward(self, h):
            return h + self.down(act(self.up(self.norm(h))))

        def flops_per_token(self, seq_len):
            return 2 * 2 * self.up.in_features * self.up.out_features
''')
GELU = "import torch.nn.functional as F\n\n\ndef act(x):\n    return F.gelu(x)\n"
TANH_GELU = GELU.replace("F.gelu(x)", "F.gelu(x, approximate='tanh')")


def install_plugin(site: Path, version: str = "0.1") -> Path:
    """Write the plugin into `site` (put it on sys.path / PYTHONPATH); returns its activation file."""
    package = Path(site) / "gelu_plugin"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('"""GELU MLP test plugin."""\n')
    (package / "mlp.py").write_text(MLP_MODULE)
    (package / "activation.py").write_text(GELU)
    dist = Path(site) / f"gelu_plugin-{version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text("[cem_ablate.components]\ngelu = gelu_plugin.mlp\n")
    return package / "activation.py"


def edit_to_tanh_gelu(activation: Path) -> None:
    activation.write_text(TANH_GELU)
