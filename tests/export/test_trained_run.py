"""`cem-ablate export` of a trained run: the folder, its tokenizer, the errors."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
import yaml

from cem_ablate.cli.main import main
from cem_ablate.config import ConfigError
from cem_ablate.data.tokenizer import ByteTokenizer
from cem_ablate.training.trained_run import load_trained_run

TEXT = "def héllo(x):\n    return x € 1\n"


def test_export_cli_writes_a_loadable_folder(trained_run, tmp_path, capsys):
    run_dir, _, _ = trained_run
    assert main(["export", str(run_dir), "--to", str(tmp_path / "hf")]) == 0
    assert "CEMAblateForCausalLM" in capsys.readouterr().out
    names = {p.name for p in (tmp_path / "hf").iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "modeling_cem_ablate.py",
        "tokenizer.json",
        "cem_ablate_export.json",
    } <= names
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]  # the temporary folder is gone
    provenance = json.loads((tmp_path / "hf" / "cem_ablate_export.json").read_text())
    assert provenance["trained_by_this_code"] is True and provenance["run_dir"] == str(run_dir.resolve())

    trained = load_trained_run(run_dir)
    ids = torch.tensor([ByteTokenizer().encode_batch([TEXT])[0].tolist()])
    with torch.no_grad():
        torch.save({"ids": ids, "logits": trained.model(ids)}, tmp_path / "ref.pt")
    script = (
        "import sys, torch; from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"d = {str(tmp_path / 'hf')!r}; ref = torch.load({str(tmp_path / 'ref.pt')!r})\n"
        "tok = AutoTokenizer.from_pretrained(d, trust_remote_code=True)\n"
        f"assert tok({TEXT!r}).input_ids == ref['ids'][0].tolist(), 'tokenizer ids differ'\n"
        "m = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True)\n"
        "print((m(ref['ids']).logits - ref['logits']).abs().max().item())\n"
        "assert not [k for k in sys.modules if k.split('.')[0] in ('cem_ablate', 'components')]\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", script],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert float(out.stdout.strip().splitlines()[-1]) <= 1e-5


def test_export_refuses_a_used_folder_before_reading_the_run(trained_run, tmp_path, capsys):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("mine")
    assert main(["export", str(tmp_path / "no-run"), "--to", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --to:")
    assert [p.name for p in (tmp_path / "hf").iterdir()] == ["keep.txt"]


def test_another_code_version(trained_run, tmp_path, capsys):
    """A run folder whose trial key this code does not compute warns once and still
    exports; weights that do not fit the model this code builds are one error, and
    nothing is written."""
    run_dir, _, _ = trained_run
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    (other / "trial_key").write_text("0123456789abcdef\n")
    assert main(["export", str(other), "--to", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("warning:")]) == 1 and "trained under other code" in err[0]

    config = yaml.safe_load((other / "config.yaml").read_text())
    config["model"]["mlp"] = {"name": "llama"}  # this code would build a SwiGLU MLP: the weights do not fit
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["export", str(other / "checkpoints" / "last.ckpt"), "--to", str(tmp_path / "b")]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("warning:")]
    assert len(err) == 1 and err[0].startswith("error: CHECKPOINT:") and "does not fit" in err[0]
    assert not (tmp_path / "b").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".b.")]


def test_missing_pieces_are_one_error(tmp_path):
    with pytest.raises(ConfigError, match="no such run folder"):
        load_trained_run(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no config.yaml"):
        load_trained_run(tmp_path / "empty")
