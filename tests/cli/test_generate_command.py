"""`cem-ablate generate` as a user runs it, on run folders laid out as `train` writes them
(config.yaml, trial_key, checkpoints/last.ckpt): greedy text equals greedy decoding by
full recomputation; a plugin without the decoding hook warns once and still generates; a
broken hook, weights that do not fit, a bad flag: one `error:` line each; a run trained
under other code: one `warning:` line."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from cem_ablate.cli.main import main
from cem_ablate.data.tokenizer import ByteTokenizer
from cem_ablate.model.blocks import RMSNorm, linear
from cem_ablate.registry import register
from cem_ablate.training.config import parse_run_config
from cem_ablate.training.run_directory import RunDirectory
from tests.model.test_decoding import random_model


@dataclass(frozen=True)
class PlainOptions:
    pass


@register("mlp", "no_decode_hook_test", options=PlainOptions, description="a ReLU MLP without decode (test)")
class NoHookMLP(nn.Module):
    def __init__(self, dims, options, steps=1):
        super().__init__()
        self.norm = RMSNorm(dims.d_model, dims.norm_eps)
        self.up = linear(dims.d_model, dims.d_mlp, dims.init_std)
        self.down = linear(dims.d_mlp, dims.d_model, dims.init_std)

    def forward(self, h):
        return h + self.down(torch.relu(self.up(self.norm(h))))

    def flops_per_token(self, seq_len):
        return 4.0 * self.up.in_features * self.up.out_features


@register("mlp", "broken_decode_hook_test", options=PlainOptions, description="decode that raises (test)")
class BrokenHookMLP(NoHookMLP):
    def decode(self, h, past, position):
        raise IndexError("off by one")


MODEL = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_mlp": 64, "max_seq_len": 128}


def write_run(folder, model: dict, seed: int = 0):
    """A run folder as `cem-ablate train` leaves it, with random (spread-out) weights."""
    cfg = parse_run_config(
        {
            "name": "gen",
            "model": {**MODEL, **model},
            "data": {"source": "stdlib", "tokenizer": "byte", "block_size": 64},
        }
    )
    RunDirectory(folder).claim(cfg, resume=False)
    net = random_model({**MODEL, **model, "vocab_size": ByteTokenizer.vocab_size}, seed).float()
    save_checkpoint(RunDirectory(folder), {"state_dict": {f"model.{k}": v for k, v in net.state_dict().items()}})
    return net


def save_checkpoint(folder: RunDirectory, state: dict) -> None:
    """`state` as the run's newest checkpoint, recorded as training records it."""
    tmp = folder.checkpoint_dir / "new.ckpt.tmp"
    torch.save(state, tmp)
    folder.checkpoints.install(tmp)


def greedy_text(net, prompt: str, n: int) -> str:
    ids = torch.tensor([list(prompt.encode())])
    with torch.no_grad():
        for _ in range(n):
            ids = torch.cat([ids, net(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ByteTokenizer().decode(ids[0, -n:].tolist())


def generate(capsys, *args):
    code = main(["generate", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "model",
    [
        {"attention": {"name": "cem", "steps": 2, "kq_diag": "shared"}, "mlp": {"name": "cem", "steps": 2}},
        {"attention": {"name": "llama"}, "mlp": {"name": "llama"}, "stream": "heavy_ball"},
    ],
)
def test_greedy_generate_equals_greedy_decoding_by_full_recomputation(tmp_path, capsys, model):
    net = write_run(tmp_path / "run", model)
    expected = greedy_text(net, "def f(", 24)
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "def f(", "--max-new-tokens", 24)
    assert code == 0 and err == "" and out == expected + "\n"
    code, out, _ = generate(
        capsys, tmp_path / "run/checkpoints/last.ckpt", "--prompt", "def f(", "--max-new-tokens", 24, "--recompute"
    )
    assert code == 0 and out == expected + "\n"
    sampled = [
        generate(
            capsys,
            tmp_path / "run",
            "--prompt",
            "def f(",
            "--max-new-tokens",
            24,
            "--temperature",
            1.0,
            "--top-k",
            40,
            "--seed",
            seed,
        )[1]
        for seed in (1, 1, 2)
    ]
    assert sampled[0] == sampled[1] != sampled[2]


def test_a_plugin_without_the_hook_generates_after_one_warning(tmp_path, capsys):
    net = write_run(tmp_path / "run", {"mlp": {"name": "no_decode_hook_test"}})
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "abc", "--max-new-tokens", 8)
    assert code == 0 and out == greedy_text(net, "abc", 8) + "\n"
    assert err.count("\n") == 1 and err.startswith("warning: mlp 'no_decode_hook_test'") and "has no decode" in err


def test_a_broken_hook_is_one_error_line(tmp_path, capsys):
    write_run(tmp_path / "run", {"mlp": {"name": "broken_decode_hook_test"}})
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "abc")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: BrokenHookMLP.decode") and "IndexError: off by one" in err


def test_a_checkpoint_from_other_code(tmp_path, capsys):
    write_run(tmp_path / "run", {})
    folder = RunDirectory(tmp_path / "run")
    folder.trial_key_file.write_text("0123456789\n")  # the key a changed component would give
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "ab", "--max-new-tokens", 4)
    assert code == 0 and len(out) > 1 and err.count("\n") == 1
    assert err.startswith("warning: ") and "trained under other code" in err
    state = torch.load(folder.checkpoints.last)
    del state["state_dict"]["model.blocks.1.attention.k_proj.weight"]  # a layer this code no longer has
    save_checkpoint(folder, state)
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "ab")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: ") and "blocks.1.attention.k_proj.weight" in err
    assert "trained under other code (trial key 0123456789" in err


@pytest.mark.parametrize(
    "args, key",
    [
        (["--top-p", "1.5"], "--top-p"),
        (["--max-new-tokens", "0"], "--max-new-tokens"),
        (["--max-new-tokens", "500"], "--max-new-tokens"),
    ],
)
def test_bad_flags_are_one_error_line(tmp_path, capsys, args, key):
    write_run(tmp_path / "run", {})
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "ab", *args)
    assert code == 2 and err.startswith(f"error: {key}") and err.count("\n") == 1


def test_a_missing_run_is_one_error_line(tmp_path, capsys):
    code, _, err = generate(capsys, tmp_path / "nothing", "--prompt", "ab")
    assert code == 2 and err.startswith("error: ") and "no such run folder" in err


def test_readers_refuse_an_altered_checkpoint(tmp_path, capsys):
    """generate (like export and eval, `training.run_directory.locate_trained`) reads only
    a checkpoint whose digest training recorded: an altered newest one falls back to the
    one before it with a warning; a named altered file, or none left, is one error."""
    net = write_run(tmp_path / "run", {}, seed=1)
    folder = RunDirectory(tmp_path / "run")
    newer = random_model({**MODEL, "vocab_size": ByteTokenizer.vocab_size}, 2).float()
    save_checkpoint(folder, {"state_dict": {f"model.{k}": v for k, v in newer.state_dict().items()}})
    expected = greedy_text(net, "ab", 4)  # seed 1's weights, now previous.ckpt
    assert expected != greedy_text(newer, "ab", 4)
    folder.checkpoints.last.write_bytes(folder.checkpoints.last.read_bytes()[:-100])  # torn
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "ab", "--max-new-tokens", 4)
    assert code == 0 and out == expected + "\n" and err.count("\n") == 1, (out, err)
    assert err.startswith("warning: checkpoint ") and "previous.ckpt" in err and "last.ckpt" in err
    code, out, err = generate(capsys, folder.checkpoints.last, "--prompt", "ab")
    assert code == 2 and out == "" and err.count("\n") == 1 and "does not match the digests" in err
    folder.checkpoints.previous.write_bytes(b"\0" * 64)
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "ab")
    assert code == 2 and out == "" and err.count("\n") == 1 and "no checkpoint in" in err


def test_a_run_from_before_digests_is_read_with_a_warning(tmp_path, capsys):
    write_run(tmp_path / "run", {})
    RunDirectory(tmp_path / "run").checkpoints.digests_file.unlink()
    code, out, err = generate(capsys, tmp_path / "run", "--prompt", "ab", "--max-new-tokens", 4)
    assert code == 0 and len(out) > 1 and err.count("\n") == 1 and "read unverified" in err
