"""Export every variant to a Hugging Face folder and load it in a process that never
imports cem_ablate: same logits (fp32, 1e-5), cached greedy decoding = uncached = the
platform's own greedy decoding by full recomputation."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cem_ablate import build_model
from cem_ablate.config import ConfigError
from cem_ablate.export.hf_directory import check_target, write_model

SMALL = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_mlp": 48, "vocab_size": 61, "max_seq_len": 64}
CEM_ATT = {"name": "cem", "steps": 2, "kq_diag": "shared", "preconditioner": {"name": "diag_lowrank", "rank": 2}}
CEM_MLP = {"name": "cem", "steps": 2, "preconditioner": {"name": "diag_lowrank", "rank": 4}}

VARIANTS = {
    "llama": {},
    "cem_att_identity_T1": {"attention": {"name": "cem", "preconditioner": {"name": "identity"}}},
    "cem_att_diag_perhead_exact_T3": {
        "attention": {
            "name": "cem",
            "steps": 3,
            "kq_diag": "per_head",
            "diag_update": "exact",
            "preconditioner": {"name": "diag"},
            "learnable_step_size": True,
        }
    },
    "cem_att_lowrank_normalized_heavy_ball": {
        "attention": {**CEM_ATT, "recursion_state": "normalized", "update": "heavy_ball", "learnable_momentum": True}
    },
    "cem_att_nesterov_kq_none": {"attention": {**CEM_ATT, "kq_diag": "none", "update": "nesterov"}},
    "full_cem_T2": {"attention": CEM_ATT, "mlp": CEM_MLP},
    "reuse_llama_att_cem_mlp": {
        "attention": {"name": "llama", "steps": 2, "depth_mode": "reuse"},
        "mlp": {**CEM_MLP, "steps": 2, "depth_mode": "reuse"},
    },
    "cem_param_matched_mlp": {"mlp": {"name": "cem_param_matched", "steps": 2}},
    "hopfield_mlp_nesterov": {"mlp": {"name": "hopfield", "steps": 2, "update": "nesterov"}},
    "stream_heavy_ball_rms": {"attention": CEM_ATT, "stream": "heavy_ball", "velocity_norm": "rms"},
    "stream_nesterov_swiglu": {"stream": "nesterov", "stream_momentum": 0.3},
    "parallel_cem": {"attention": CEM_ATT, "mlp": CEM_MLP, "block": "parallel"},
    "parallel_llama_heavy_ball": {"block": "parallel", "stream": "heavy_ball"},
}


def perturbed_model(config: dict, seed: int):
    """A variant whose every parameter is off its init (a weight that failed to load
    would show): norm gains, step sizes, momenta and preconditioners included."""
    torch.manual_seed(seed)
    model = build_model({**SMALL, **config}).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def platform_greedy(model, prompt: torch.Tensor, new_tokens: int) -> list[int]:
    ids = prompt
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids[0].tolist()


def fresh_process(script: Path, *args, tmp: Path) -> None:
    """`python -I`: no PYTHONPATH, no cwd on sys.path; HF caches inside tmp, offline."""
    env = {**os.environ, "HF_HOME": str(tmp / "hf_home"), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-I", str(script), *map(str, args)], check=True, cwd=tmp, env=env, timeout=600)


def test_every_variant_loads_without_the_platform(tmp_path):
    cases, expected = [], {}
    for seed, (name, config) in enumerate(VARIANTS.items()):
        model = perturbed_model(config, seed)
        folder = tmp_path / name
        folder.mkdir()
        write_model(model, folder)
        ids = torch.randint(0, SMALL["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(seed))
        prompt = ids[:1, :7]
        torch.save({"ids": ids, "prompt": prompt}, tmp_path / f"{name}.pt")
        with torch.no_grad():
            expected[str(folder)] = (model(ids), platform_greedy(model, prompt, 6))
        cases.append({"dir": str(folder), "inputs": str(tmp_path / f"{name}.pt")})
    # Two exports in folders of the same name, loaded one after the other in one process:
    # Hugging Face caches remote code by folder name; each must still run its own source.
    for seed, name in enumerate(("full_cem_T2", "hopfield_mlp_nesterov"), start=100):
        model = perturbed_model(VARIANTS[name], seed)
        folder = tmp_path / f"same_name_{seed}" / "model"
        folder.mkdir(parents=True)
        write_model(model, folder)
        with torch.no_grad():
            expected[str(folder)] = (
                model(torch.load(tmp_path / f"{name}.pt")["ids"]),
                platform_greedy(model, torch.load(tmp_path / f"{name}.pt")["prompt"], 6),
            )
        cases.append({"dir": str(folder), "inputs": str(tmp_path / f"{name}.pt")})
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    fresh_process(Path(__file__).with_name("hf_check.py"), tmp_path / "cases.json", tmp_path / "out.json", tmp=tmp_path)
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["platform_modules"] == []
    assert len(report["results"]) == len(VARIANTS) + 2
    for result in report["results"]:
        logits, greedy = expected[result["dir"]]
        theirs = torch.load(result["dir"] + ".logits.pt")
        name = Path(result["dir"]).name
        assert theirs.shape == logits.shape
        assert (theirs - logits).abs().max().item() <= 1e-5, name
        assert result["greedy"]["True"] == result["greedy"]["False"] == greedy, name
        assert result["greedy"]["beams_True"] == result["greedy"]["beams_False"], name  # reordered states stay exact
        config = json.loads((Path(result["dir"]) / "config.json").read_text())
        if name == "llama":  # the baseline stays a plain LlamaForCausalLM: no remote code
            assert result["class"] == "LlamaForCausalLM" and "auto_map" not in config
        else:
            assert result["class"] == "CEMAblateForCausalLM"
            assert result["incremental"], name  # generate(use_cache=True) runs the components' decoding hooks
            assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_cem_ablate.CEMAblateForCausalLM"


def test_bundle_depends_only_on_torch_and_transformers(tmp_path):
    """Every import of the copied files outside the folder is torch, transformers,
    numpy (a transformers dependency) or the standard library."""
    import ast

    write_model(perturbed_model(VARIANTS["full_cem_T2"] | {"stream": "nesterov"}, 0), tmp_path)
    outside = set()
    for file in tmp_path.glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                outside |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                outside.add(node.module.split(".")[0])
    assert outside - set(sys.stdlib_module_names) == {"torch", "transformers", "numpy"}


def test_target_must_be_new(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    with pytest.raises(ConfigError, match="--to"):
        check_target(tmp_path / "taken")
    check_target(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_target(tmp_path / "empty")
