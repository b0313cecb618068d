"""What `parametrization: standard` must keep bit for bit: the data behind test_parametrization.

Run as a script against a checkout to write the reference (the committed
`data/standard_reference.json` holds what 58995e8, before parametrizations existed, computed):

    PYTHONPATH=<checkout> python tests/model/standard_regression.py <checkout> > new.json

and merge its `models_by_machine` entry into the reference to record one more machine.
It imports only what that commit already had (build_model, parameter_groups, the study
loaders) and steps a plain `torch.optim.AdamW` (on CPU what `build_adamw` built then and
builds now), so the same function runs on the old and the new code.

Bit identity is a property of code *and* machine: the float64 kernels of another CPU (another
BLAS path, another vector width) sum in another order, and every digest differs while the
code is the same (measured: the reference of one machine against another's, 2026-11-26, old
code and new code equal there bit for bit). So the reference keeps, per machine, the digests
under that machine's `kernel_canary()` (pure torch, no platform code), and for every machine
`projections()`: fixed random projections of the same tensors, compared within 1e-9 of their
scale, far above reordering's ~1e-15 and far below what any change of the model or its step
moves (test_parametrization).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

CONFIGS = {
    "llama": {"size": "tiny", "vocab_size": 256},
    "cem_attention_T2": {
        "size": "tiny",
        "vocab_size": 256,
        "attention": {
            "name": "cem",
            "steps": 2,
            "kq_diag": "shared",
            "preconditioner": {"name": "diag_lowrank", "rank": 4},
        },
    },
    "full_cem_T2": {
        "size": "tiny",
        "vocab_size": 256,
        "attention": {
            "name": "cem",
            "steps": 2,
            "kq_diag": "per_head",
            "diag_update": "exact",
            "preconditioner": "diag",
        },
        "mlp": {"name": "cem", "steps": 2, "preconditioner": {"name": "diag_lowrank", "rank": 16}},
    },
    "hopfield_nesterov": {
        "size": "tiny",
        "vocab_size": 256,
        "stream": "nesterov",
        "attention": {"name": "cem", "steps": 3, "update": "heavy_ball"},
        "mlp": {"name": "hopfield", "steps": 2, "learnable_step_size": True},
    },
    "parallel": {
        "size": "tiny",
        "vocab_size": 256,
        "block": "parallel",
        "attention": {"name": "cem", "steps": 2},
        "mlp": {"name": "cem", "steps": 2},
    },
    "reuse": {"size": "tiny", "vocab_size": 256, "attention": {"name": "llama", "steps": 2, "depth_mode": "reuse"}},
}


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().to(torch.float64).contiguous().numpy().tobytes())
    return h.hexdigest()


def outputs_of_configs() -> dict[str, dict[str, list[torch.Tensor]]]:
    """Per config: the float64 logits at init and every parameter after one AdamW step."""
    from cem_ablate import build_model

    out = {}
    for name, cfg in CONFIGS.items():
        torch.manual_seed(0)
        model = build_model(cfg).double()
        ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
        logits = model(ids)
        optimizer = torch.optim.AdamW(model.parameter_groups(0.1), lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
        torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1)).backward()
        optimizer.step()
        out[name] = {"logits": [logits.detach()], "after_step": [p.detach() for p in model.parameters()]}
    return out


def model_digests(outputs=None) -> dict[str, dict[str, str]]:
    """Per config: sha256 of the float64 logits at init and of every parameter after one AdamW step."""
    outputs = outputs or outputs_of_configs()
    return {name: {part: _digest(ts) for part, ts in parts.items()} for name, parts in outputs.items()}


def projections(outputs=None, k: int = 8) -> dict[str, dict[str, dict[str, object]]]:
    """Per config and part: `k` projections of the flattened tensors on fixed N(0, 1/n) vectors,
    and their scale (the root mean square of the entries): what another machine must come
    within 1e-9 * scale of."""
    outputs = outputs or outputs_of_configs()
    out = {}
    for name, parts in outputs.items():
        out[name] = {}
        for part, ts in parts.items():
            v = torch.cat([t.reshape(-1).to(torch.float64) for t in ts])
            basis = torch.randn(k, v.numel(), generator=torch.Generator().manual_seed(123), dtype=torch.float64)
            out[name][part] = {
                "scale": float(v.square().mean().sqrt()),
                "values": [float(x) for x in basis @ v / v.numel() ** 0.5],
            }
    return out


def kernel_canary() -> str:
    """sha256 of a pure-torch float64 forward, backward and AdamW step through the kernels the
    models use (matmul, softmax, rsqrt, silu, exp, cross-entropy): equal on two machines when
    their float64 kernels give the same bits."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 24, 64, generator=g, dtype=torch.float64)
    w = torch.randn(64, 256, generator=g, dtype=torch.float64, requires_grad=True)
    u = torch.randn(64, 176, generator=g, dtype=torch.float64, requires_grad=True)
    h = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5)
    scores = (h @ h.transpose(-1, -2) / 8.0).masked_fill(torch.ones(24, 24, dtype=torch.bool).triu(1), float("-inf"))
    h = h + torch.softmax(scores, -1) @ h
    h = h + torch.nn.functional.silu(h @ u) @ u.T * torch.exp(-h.abs().mean())
    logits = h @ w
    ids = torch.randint(0, 256, (2, 24), generator=g)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 256), ids.reshape(-1)).backward()
    optimizer = torch.optim.AdamW([w, u], lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    optimizer.step()
    return _digest([logits, w.grad, u.grad, w, u])


def study_variant_keys(studies_dir: Path) -> dict[str, str]:
    """{'<file>[:<scale>]/<variant name>': variant key} for every study file and scale."""
    import yaml

    from cem_ablate.study.spec import load_study_mapping, parse_study
    from cem_ablate.study.variants import expand

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
    outputs = outputs_of_configs()
    json.dump(
        {
            "models_by_machine": {kernel_canary(): model_digests(outputs)},
            "projections": projections(outputs),
            "variant_keys": study_variant_keys(root / "studies"),
        },
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
