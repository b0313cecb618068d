"""Export of a model built from plugins installed outside the repository: every module of
a plugin's distribution that its component imports (a sibling top-level module, a
package's submodules, transitively) and the zoo's building blocks it imports are copied,
so the folder loads and generates in a process where neither the plugin nor cem_ablate
(nor components) can be imported; an import the export cannot copy stops it with one
`ConfigError` naming that import, before anything is written. A component without
`decode` exports with a warning, and the exported model's cached `generate` says so once."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent

# Two distributions: three top-level modules importing each other (absolute imports), and
# a package with relative imports. Neither uses a built-in component; the attention
# imports RoPE from the zoo's public building blocks.
SIGMOID_ATTENTION = textwrap.dedent("""
    import torch
    from torch import nn

    from cem_ablate.model.blocks import RMSNorm, linear
    from cem_ablate.registry import register
    from components.attention_blocks import RotaryEmbedding
    from sig_parts import sigmoid_attend


    @register("attention", "sigmoid_two_module", description="sigmoid attention over two modules, no decode")
    class SigmoidAttention(nn.Module):
        def __init__(self, dims, options, steps=1):
            super().__init__()
            self.n_heads, self.head_dim = dims.n_heads, dims.head_dim
            self.norm = RMSNorm(dims.d_model, dims.norm_eps)
            self.qkv = linear(dims.d_model, 3 * dims.d_model, dims.init_std)
            self.out = linear(dims.d_model, dims.d_model, dims.init_std)
            self.rope = RotaryEmbedding(self.head_dim)
            self.scale = 1.0 / dims.attention_temperature

        def forward(self, h):
            b, j, d = h.shape
            q, k, v = self.qkv(self.norm(h)).view(b, j, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            cos, sin = self.rope(j, h.dtype, h.device)
            q, k = RotaryEmbedding.apply(q, cos, sin), RotaryEmbedding.apply(k, cos, sin)
            return h + self.out(sigmoid_attend(q, k, v, self.scale).transpose(1, 2).reshape(b, j, d))

        def flops_per_token(self, seq_len):
            d = self.out.in_features
            return 2 * 4 * d * d + 2 * 2 * (seq_len + 1) / 2 * d
""")
SIG_PARTS = textwrap.dedent("""
    import math

    import torch

    from sig_masks import causal_keep


    def sigmoid_attend(q, k, v, scale):
        j = q.shape[-2]
        weights = torch.sigmoid(q @ k.transpose(-1, -2) * scale - math.log(j))
        return (weights * causal_keep(j, q.device)) @ v
""")
SIG_MASKS = "import torch\n\n\ndef causal_keep(j, device):\n    return torch.ones(j, j, device=device).tril()\n"
RELU_PACKAGE = {
    "relu_pkg/__init__.py": "from . import mlp  # noqa: F401  (registers)\n",
    "relu_pkg/mlp.py": textwrap.dedent("""
        from torch import nn

        from cem_ablate.model.blocks import RMSNorm, linear
        from cem_ablate.registry import register
        from .ops import relu_squared


        @register("mlp", "relu2_pkg", description="squared-ReLU MLP from a package")
        class ReluSquaredMLP(nn.Module):
            def __init__(self, dims, options, steps=1):
                super().__init__()
                self.norm = RMSNorm(dims.d_model, dims.norm_eps)
                self.up = linear(dims.d_model, dims.d_mlp, dims.init_std)
                self.down = linear(dims.d_mlp, dims.d_model, dims.init_std)

            def forward(self, h):
                return h + self.down(relu_squared(self.up(self.norm(h))))

            def decode(self, h, past, position):
                return self.forward(h), None

            def flops_per_token(self, seq_len):
                return 4 * self.up.in_features * self.up.out_features
    """),
    "relu_pkg/ops.py": "import torch\n\n\ndef relu_squared(x):\n    return torch.relu(x).square()\n",
}
# Imports the export cannot copy: a module of no distribution, a third-party package.
LOOSE_MLP = (
    RELU_PACKAGE["relu_pkg/mlp.py"]
    .replace("from .ops import relu_squared", "from loose_helper import relu_squared")
    .replace('"relu2_pkg"', '"loose_mlp"')
)
YAML_MLP = (
    RELU_PACKAGE["relu_pkg/mlp.py"]
    .replace("from .ops import relu_squared", "import yaml\nfrom torch import relu as relu_squared")
    .replace('"relu2_pkg"', '"yaml_mlp"')
)

DISTRIBUTIONS = {  # distribution -> (files, entry points)
    "two-module-plugin": (
        {"sig_attention.py": SIGMOID_ATTENTION, "sig_parts.py": SIG_PARTS, "sig_masks.py": SIG_MASKS},
        {"sigmoid": "sig_attention"},
    ),
    "relu-pkg": (RELU_PACKAGE, {"relu2": "relu_pkg"}),
    "loose-mlp": ({"loose_mlp.py": LOOSE_MLP}, {"loose": "loose_mlp"}),
    "yaml-mlp": ({"yaml_mlp.py": YAML_MLP}, {"yaml_user": "yaml_mlp"}),
}
PLUGIN_MODULES = ["sig_attention", "sig_parts", "sig_masks", "relu_pkg", "loose_mlp", "yaml_mlp", "loose_helper"]


def install(site: Path) -> None:
    """Files, METADATA, entry points and RECORD of each distribution, as pip leaves them;
    `loose_helper.py` belongs to none."""
    for dist, (files, entry_points) in DISTRIBUTIONS.items():
        for name, code in files.items():
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_text(code)
        info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[cem_ablate.components]\n{lines}")
        (info / "RECORD").write_text("".join(f"{name},,\n" for name in files))
    (site / "loose_helper.py").write_text(RELU_PACKAGE["relu_pkg/ops.py"])


EXPORT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch
    from cem_ablate import build_model
    from cem_ablate.config.errors import ConfigError
    from cem_ablate.export.hf_directory import decoding_warning, write_model

    tmp = Path(sys.argv[1])
    small = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_mlp": 48, "vocab_size": 61, "max_seq_len": 32}
    torch.manual_seed(0)
    model = build_model({**small, "attention": "sigmoid_two_module", "mlp": "relu2_pkg"}).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    (tmp / "hf").mkdir()
    write_model(model, tmp / "hf")
    ids = torch.randint(0, 61, (2, 20), generator=torch.Generator().manual_seed(1))
    prompt = ids[:1, :6]
    greedy = prompt
    with torch.no_grad():
        logits = model(ids)
        for _ in range(5):
            greedy = torch.cat([greedy, model(greedy)[:, -1].argmax(-1, keepdim=True)], dim=1)
    torch.save({"ids": ids, "prompt": prompt, "logits": logits}, tmp / "inputs.pt")
    errors = {}
    for name in ("loose_mlp", "yaml_mlp"):
        (tmp / name).mkdir()
        try:
            write_model(build_model({**small, "mlp": name}), tmp / name)
            errors[name] = None
        except ConfigError as err:
            errors[name] = str(err)
    json.dump({"greedy": greedy[0].tolist(), "warning": decoding_warning(model), "errors": errors,
               "written": sorted(p.name for name in errors for p in (tmp / name).iterdir())},
              open(tmp / "export.json", "w"))
""")


@pytest.mark.slow
def test_plugin_modules_are_bundled_and_the_folder_loads_without_them(tmp_path):
    site = tmp_path / "site"
    install(site)
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    made = subprocess.run(
        [sys.executable, "-c", EXPORT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert made.returncode == 0, made.stderr[-3000:]
    export = json.loads((tmp_path / "export.json").read_text())
    files = sorted(p.name for p in (tmp_path / "hf").glob("*.py"))
    for module in (
        "sig_attention",
        "sig_parts",
        "sig_masks",
        "relu_pkg__mlp",
        "relu_pkg__ops",
        "components__attention_blocks",
        "components__rope",
    ):
        assert f"{module}.py" in files, (module, files)
    assert export["warning"] == (
        "warning: attention 'sigmoid_two_module' (plugin sigmoid (sig_attention)) has no decode "
        "(model/protocol.py IncrementalDecoding): the exported model's generate(use_cache=True) recomputes "
        "the whole prefix for every new token."
    )

    # Refused, one sentence naming the import (and the chain that reached it), nothing written.
    assert export["written"] == []
    loose, third_party = export["errors"]["loose_mlp"], export["errors"]["yaml_mlp"]
    assert loose.startswith("export: loose_mlp imports 'loose_helper', which the export cannot bundle")
    assert third_party.startswith("export: yaml_mlp imports 'yaml', which the export cannot bundle")
    assert "\n" not in loose + third_party

    out = tmp_path / "check.json"
    check = subprocess.run(
        [
            sys.executable,
            "-I",
            str(HERE / "plugin_check.py"),
            str(tmp_path / "hf"),
            str(tmp_path / "inputs.pt"),
            str(out),
            "cem_ablate",
            "components",
            *PLUGIN_MODULES,
        ],
        cwd=tmp_path,
        env={**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["importable"] == [] and report["loaded"] == []
    assert report["class"] == "CEMAblateForCausalLM"
    import torch

    theirs, ours = torch.load(str(out) + ".logits.pt"), torch.load(tmp_path / "inputs.pt")["logits"]
    assert (theirs - ours).abs().max().item() <= 1e-5
    assert report["greedy"]["True"] == report["greedy"]["False"] == export["greedy"]
    assert [line for line in check.stderr.splitlines() if "has no decode" in line] == [
        "attention 'sigmoid_two_module' has no decode: "
        "generate(use_cache=True) recomputes the whole prefix for every new token "
        "(no incremental decoding)."
    ]
