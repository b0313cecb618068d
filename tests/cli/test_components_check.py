"""`cem-ablate components --check NAME`: attention plugins written from the contract on
docs/reference/components.md ("The contract: attention"), installed in a temp site as
pip leaves them. ReLU² attention (RoPE from the zoo's building blocks, its own causal
mask and K, V cache) passes; a copy that forgets the mask, one whose decode forgets the
cache, and one counting every key in flops_per_token each fail with one `error:` line
naming what fails. A study using the acausal one (its dry run too) stops before anything
is created."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from tests.test_plugins import _install

ROOT = Path(__file__).resolve().parents[2]

RELU2_ATTENTION = textwrap.dedent("""
    import torch
    from torch import nn

    from cem_ablate.model.blocks import RMSNorm, linear
    from cem_ablate.registry import register
    from components.rope import RotaryEmbedding


    @register("attention", "relu2", description="ReLU² attention: relu(q·k/τ)² averaged over the keys seen")
    class ReLU2Attention(nn.Module):
        def __init__(self, dims, options, steps=1):
            super().__init__()
            self.n_heads, self.head_dim, self.tau = dims.n_heads, dims.head_dim, dims.attention_temperature
            self.norm = RMSNorm(dims.d_model, dims.norm_eps)
            self.q, self.k, self.v, self.o = (linear(dims.d_model, dims.d_model, dims.init_std) for _ in range(4))
            self.rope = RotaryEmbedding(self.head_dim)

        def _heads(self, x):
            b, j, _ = x.shape
            return x.view(b, j, self.n_heads, self.head_dim).transpose(1, 2)

        def _keys_values(self, x, position):
            cos, sin = self.rope(position + x.shape[1], x.dtype, x.device)
            keys = RotaryEmbedding.apply(self._heads(self.k(x)), cos[position:], sin[position:])
            return keys, self._heads(self.v(x))

        def _attend(self, x, keys, values, position):
            b, j, d = x.shape
            cos, sin = self.rope(position + j, x.dtype, x.device)
            q = RotaryEmbedding.apply(self._heads(self.q(x)), cos[position:], sin[position:])
            queries = torch.arange(position, position + j, device=x.device)[:, None]
            keep = torch.arange(keys.shape[2], device=x.device)[None, :] <= queries  # causal: key <= query
            weights = torch.relu(q @ keys.transpose(-1, -2) / self.tau).square() * keep / (queries + 1)
            return self.o((weights @ values).transpose(1, 2).reshape(b, j, d))

        def forward(self, h):
            x = self.norm(h)
            keys, values = self._keys_values(x, 0)
            return h + self._attend(x, keys, values, 0)

        def decode(self, h, past, position):
            x = self.norm(h)
            keys, values = self._keys_values(x, position)
            if past is not None:
                keys, values = torch.cat([past[0], keys], dim=2), torch.cat([past[1], values], dim=2)
            return h + self._attend(x, keys, values, position), (keys, values)

        def flops_per_token(self, seq_len):
            d = self.o.in_features
            return 2 * 4 * d * d + 2 * 2 * (seq_len + 1) / 2 * d  # four projections; q·k and w·v, causal half
""")
# Each breaks one rule, and only that one.
ACAUSAL = (
    RELU2_ATTENTION.replace('"relu2"', '"relu2_acausal"')
    .replace("* keep /", "/")
    .replace("def decode(", "def _no_decode(")
)
FORGETFUL = RELU2_ATTENTION.replace('"relu2"', '"relu2_forgetful"').replace("if past is not None:", "if False:")
EVERY_KEY = RELU2_ATTENTION.replace('"relu2"', '"relu2_every_key"').replace("(seq_len + 1) / 2 * d", "seq_len * d")
PLUGINS = {
    "relu2_attention": RELU2_ATTENTION,
    "relu2_acausal": ACAUSAL,
    "relu2_forgetful": FORGETFUL,
    "relu2_every_key": EVERY_KEY,
}


def _cli(args, site: Path, cwd: Path = ROOT):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_attention_plugins_against_the_contract(tmp_path):
    assert ACAUSAL.count("* keep") == 0 and "if False:" in FORGETFUL and "seq_len * d" in EVERY_KEY
    site = tmp_path / "site"
    _install(site, "relu2-plugins", PLUGINS, {name: name for name in PLUGINS})
    label = "attention '{}' (plugin {} ({}))"

    good = _cli(["components", "--check", "relu2"], site)
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines() == [
        f"ok: {label.format('relu2', 'relu2_attention', 'relu2_attention')}: shape, causality, decode, flops_per_token"
    ]

    def failure(name, plugin):
        out = _cli(["components", "--check", f"attention/{name}"], site)
        assert out.returncode == 1
        errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and len(out.stderr.splitlines()) == 1, out.stderr
        assert errors[0].startswith(f"error: {label.format(name, plugin, plugin)}: ")
        return errors[0].split("): ", 1)[1], out.stdout

    acausal, stdout = failure("relu2_acausal", "relu2_acausal")
    assert acausal.startswith("not causal: changing the tokens from position 1 on changes the output at position 0")
    assert "no decode" in stdout  # optional: a note, not a failure
    forgetful, _ = failure("relu2_forgetful", "relu2_forgetful")
    assert forgetful.startswith("decode differs from forward: at position 5 ")  # the first token after the prefill
    every_key, _ = failure("relu2_every_key", "relu2_every_key")
    d, j = 32, 16
    assert every_key.startswith(
        f"flops_per_token({j}) = {8 * d * d + 4 * j * d}, but FlopCounterMode counts {8 * d * d + 2 * (j + 1) * d} "
    )

    # A study of the acausal attention: one error at start, nothing trained, no store created.
    study = {
        "name": "acausal",
        "base": {
            "model": {"size": "tiny", "max_seq_len": 32},
            "train": {"max_steps": 2, "batch_size": 2},
            "data": {"source": "stdlib", "tokenizer": "byte", "block_size": 32},
        },
        "variants": [{"name": "acausal", "set": {"model.attention": "relu2_acausal"}}],
        "lr_search": {"grid": [1e-3], "fixed": True},
        "seeds": [0],
    }
    (tmp_path / "acausal.yaml").write_text(yaml.safe_dump(study))
    for extra in (["--dry-run"], ["--threads", "1"]):
        run = _cli(["study", "acausal.yaml", *extra], site, cwd=tmp_path)
        assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
        [error] = [line for line in run.stderr.splitlines() if line.startswith("error:")]
        assert error.startswith(
            "error: model.attention: attention 'relu2_acausal' (plugin relu2_acausal "
            "(relu2_acausal)), used by variant 'acausal', fails the component contract: not causal: "
        )
        assert not (tmp_path / "mlruns").exists()
