"""What `parametrization: standard` must keep bit for bit: the data behind test_parametrization.

Run as a script against a checkout to write the reference (the committed
`data/standard_reference.json` was written at 58995e8, before parametrizations existed):

    PYTHONPATH=<checkout> python tests/model/standard_regression.py > tests/model/data/standard_reference.json

It imports only what that commit already had (build_model, parameter_groups, build_adamw,
the study loaders), so the same function runs on the old and the new code.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

CONFIGS = {
    "llama": {"size": "tiny", "vocab_size": 256},
    "cem_attention_T2": {"size": "tiny", "vocab_size": 256,
                         "attention": {"name": "cem", "steps": 2, "kq_diag": "shared",
                                       "preconditioner": {"name": "diag_lowrank", "rank": 4}}},
    "full_cem_T2": {"size": "tiny", "vocab_size": 256,
                    "attention": {"name": "cem", "steps": 2, "kq_diag": "per_head", "diag_update": "exact",
                                  "preconditioner": "diag"},
                    "mlp": {"name": "cem", "steps": 2, "preconditioner": {"name": "diag_lowrank", "rank": 16}}},
    "hopfield_nesterov": {"size": "tiny", "vocab_size": 256, "stream": "nesterov",
                          "attention": {"name": "cem", "steps": 3, "update": "heavy_ball"},
                          "mlp": {"name": "hopfield", "steps": 2, "learnable_step_size": True}},
    "parallel": {"size": "tiny", "vocab_size": 256, "block": "parallel",
                 "attention": {"name": "cem", "steps": 2}, "mlp": {"name": "cem", "steps": 2}},
    "reuse": {"size": "tiny", "vocab_size": 256, "attention": {"name": "llama", "steps": 2, "depth_mode": "reuse"}},
}


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().to(torch.float64).contiguous().numpy().tobytes())
    return h.hexdigest()


def model_digests() -> dict[str, dict[str, str]]:
    """Per config: the float64 logits at init and every parameter after one AdamW step."""
    from cem_ablate.model.assembly import build_model
    from cem_ablate.training.optimizer import build_adamw

    out = {}
    for name, cfg in CONFIGS.items():
        torch.manual_seed(0)
        model = build_model(cfg).double()
        ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
        logits = model(ids)
        optimizer = build_adamw(model.parameter_groups(0.1), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, device="cpu")
        torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1)).backward()
        optimizer.step()
        out[name] = {"logits": _digest([logits]), "after_step": _digest(model.parameters())}
    return out


def study_variant_keys(studies_dir: Path) -> dict[str, str]:
    """{'<file>[:<scale>]/<variant name>': variant key} for every study file and scale."""
    from cem_ablate.study.spec import load_study_mapping, parse_study
    from cem_ablate.study.variants import expand
    import yaml

    out = {}
    for path in sorted(studies_dir.glob("*.yaml")):
        scales = [None, *((yaml.safe_load(path.read_text()) or {}).get("scale") or {})]
        for scale in scales:
            mapping = load_study_mapping(path, scale)
            for variant in expand(parse_study(mapping), mapping).variants:
                out[f"{path.name}:{scale or ''}/{variant.name}"] = variant.config.variant_key()
    return out


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    json.dump({"models": model_digests(), "variant_keys": study_variant_keys(root / "studies")},
              sys.stdout, indent=1, sort_keys=True)
