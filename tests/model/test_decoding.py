"""Incremental decoding with a cache (model/decoding.py): for every built-in component
and option, float64 and random weights, the logits of a prompt prefilled in a chunk and
then decoded token by token equal the full forward's to 1e-10; the cache holds one
D-wide tensor per CEM attention layer against Llama's two; a sublayer without the hook
decodes by recomputation, a broken hook is one DecodingHookError."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cem_ablate import build_model
from cem_ablate.model.decoding import DecodingCache, decode, missing_hooks, new_cache
from cem_ablate.model.protocol import DecodingHookError

DIMS = {"d_model": 24, "n_layers": 2, "n_heads": 3, "d_mlp": 40, "vocab_size": 31, "max_seq_len": 64}
PRE = ("identity", "diag", {"name": "diag_lowrank", "rank": 3})
CEM_MLP = {"name": "cem", "preconditioner": {"name": "diag_lowrank", "rank": 3}}


def _cem(steps=2, **options):
    return {"name": "cem", "steps": steps, **options}


VARIANTS = {
    "llama": {},
    **{
        f"cem_att_{i}_{kq}_{du}": {"attention": _cem(2, preconditioner=p, kq_diag=kq, diag_update=du)}
        for i, p in enumerate(PRE)
        for kq in ("none", "shared", "per_head")
        for du in ("paper", "exact")
        if not (kq == "none" and du == "exact")
    },
    "cem_att_T1": {"attention": _cem(1, kq_diag="shared")},
    "cem_att_T4_nesterov": {
        "attention": _cem(
            4,
            kq_diag="per_head",
            update="nesterov",
            momentum=0.6,
            learnable_momentum=True,
            step_size=0.7,
            learnable_step_size=True,
        )
    },
    "cem_att_heavy_ball_normalized": {
        "attention": _cem(
            3, kq_diag="shared", update="heavy_ball", momentum=0.5, recursion_state="normalized", backprop_steps=1
        )
    },
    "cem_att_reference": {"attention": _cem(2, kq_diag="shared", impl="reference", diag_update="exact")},
    "cem_att_sdpa": {"attention": _cem(2, kernel="sdpa")},
    "reuse": {
        "attention": _cem(2, kq_diag="shared", depth_mode="reuse"),
        "mlp": {"name": "llama", "steps": 2, "depth_mode": "reuse"},
    },
    "llama_reuse": {"attention": {"name": "llama", "steps": 3, "depth_mode": "reuse"}},
    "cem_mlp": {"mlp": {**CEM_MLP, "steps": 3, "update": "heavy_ball"}},
    "cem_mlp_param_matched": {"mlp": {"name": "cem_param_matched", "steps": 2, "recursion_state": "normalized"}},
    "hopfield": {"mlp": {"name": "hopfield", "steps": 2, "update": "nesterov", "preconditioner": "diag"}},
    "full_cem_T4": {"attention": _cem(4, kq_diag="shared", preconditioner=PRE[2]), "mlp": {**CEM_MLP, "steps": 4}},
    "heavy_ball_stream": {"stream": "heavy_ball", "attention": _cem(2, kq_diag="shared"), "mlp": CEM_MLP},
    "nesterov_stream_rms": {
        "stream": "nesterov",
        "velocity_norm": "rms",
        "attention": _cem(2, depth_mode="reuse"),
        "mlp": {"name": "hopfield"},
    },
    "llama_nesterov_stream": {"stream": "nesterov"},
    "parallel_llama": {"block": "parallel"},
    "parallel_energy": {
        "block": "parallel",
        "attention": _cem(3, kq_diag="per_head", diag_update="exact"),
        "mlp": {"name": "hopfield", "steps": 3},
    },
    "parallel_cem_mlp_stream": {
        "block": "parallel",
        "stream": "heavy_ball",
        "attention": _cem(2, kq_diag="shared", step_size=0.5),
        "mlp": {"name": "cem", "steps": 2, "step_size": 0.5},
    },
    # muP (docs/design/parametrization.md#s12-parametrization): the attention temperature d_head / sqrt(d_head_base) in every decode path
    "llama_mup": {"parametrization": "mup", "base_d_model": 12},
    "full_cem_mup_inverse_steps": {
        "parametrization": "mup",
        "base_d_model": 48,
        "step_scaling": "inverse_steps",
        "attention": _cem(3, kq_diag="shared", preconditioner=PRE[2]),
        "mlp": {**CEM_MLP, "steps": 2},
    },
}


def random_model(config: dict, seed: int = 0) -> nn.Module:
    """float64, every parameter moved off its (often zero or one) init, so each matters."""
    torch.manual_seed(seed)
    model = build_model({**DIMS, **config}).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or ".velocity_norm." in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith("stream_logit") or name.endswith("momentum_logit"):
                p.normal_(0.0, 1.0)
            elif p.dim() <= 1 or "kq_diag" in name or "precond" in name:
                p.normal_(0.0, 0.3)
            else:
                p.normal_(0.0, 0.15)
    return model


def token_ids(seed=0, batch=2, seq=11):
    return torch.randint(0, DIMS["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(seed))


def cached_logits(model, ids, prefill: int) -> torch.Tensor:
    """A chunk of `prefill` tokens, then one token at a time."""
    cache = new_cache(model)
    out = [decode(model, ids[:, :prefill], cache)]
    for i in range(prefill, ids.shape[1]):
        out.append(decode(model, ids[:, i : i + 1], cache))
    assert cache.position == ids.shape[1]
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_cached_decoding_gives_the_full_forward_logits(name):
    model = random_model(VARIANTS[name])
    assert missing_hooks(model) == []
    ids = token_ids()
    with torch.no_grad():
        full = model(ids)
    for prefill in (1, 4):
        cached = cached_logits(model, ids, prefill)
        assert (cached - full).abs().max().item() < 1e-10, name
    assert full.abs().max() > 0.1  # not a degenerate model


def test_a_chunk_after_a_cached_prefix_is_exact():
    """Chunks longer than one token after a cached prefix (a mask on the new rows)."""
    for name in ("llama", "cem_att_2_per_head_exact", "parallel_energy"):
        model = random_model(VARIANTS[name])
        ids = token_ids(seed=1, seq=10)
        cache = new_cache(model)
        got = torch.cat(
            [decode(model, ids[:, :3], cache), decode(model, ids[:, 3:7], cache), decode(model, ids[:, 7:], cache)],
            dim=1,
        )
        assert (got - model(ids).detach()).abs().max().item() < 1e-10, name


def test_the_training_forward_is_unchanged_by_decoding():
    """Decoding keeps nothing on the modules: the forward after it is bit-identical."""
    model = random_model(VARIANTS["full_cem_T4"])
    ids = token_ids()
    before = model(ids).detach()
    cached_logits(model, ids, 3)
    assert torch.equal(model(ids).detach(), before)


def _cache_bytes_per_token(config: dict) -> float:
    model = build_model({**DIMS, **config}).eval()  # float32
    cache = new_cache(model)
    decode(model, token_ids(seq=8), cache)
    return cache.bytes_per_token()


@pytest.mark.parametrize("steps", [1, 4])
@pytest.mark.parametrize("kq_diag", ["none", "shared", "per_head"])
def test_cem_attention_caches_half_of_llamas_bytes_per_token(steps, kq_diag):
    llama = _cache_bytes_per_token({})
    assert llama == 2 * DIMS["n_layers"] * DIMS["d_model"] * 4  # K and V, float32
    cem = _cache_bytes_per_token({"attention": _cem(steps, kq_diag=kq_diag)})
    assert cem / llama == 0.5
    # MLPs keep nothing; reuse keeps one entry per application
    assert _cache_bytes_per_token({"attention": _cem(steps), "mlp": {"name": "cem", "steps": steps}}) == cem
    reuse = _cache_bytes_per_token({"attention": _cem(steps, depth_mode="reuse")})
    assert reuse == steps * cem


def test_select_keeps_batch_rows():
    model = random_model(VARIANTS["reuse"])
    ids = token_ids(batch=3, seq=6)
    cache = new_cache(model)
    decode(model, ids[:, :5], cache)
    cache.select(torch.tensor([2, 0]))
    got = decode(model, ids[[2, 0], 5:], cache)
    assert (got - model(ids[[2, 0]]).detach()[:, 5:]).abs().max().item() < 1e-10


# -- plugins: without the hook (recompute), with a broken one (one error) -------------------
class NoHookMLP(nn.Module):
    """A position-wise MLP without `decode`: the model cannot know it is position-wise."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, h):
        return self.inner(h)

    def flops_per_token(self, seq_len):
        return 0.0


class BrokenHookMLP(NoHookMLP):
    def decode(self, h, past, position):
        return h[:, :1], None  # wrong shape for more than one token


class RaisingHookMLP(NoHookMLP):
    def decode(self, h, past, position):
        raise RuntimeError("not implemented yet")


def _swap_mlps(model, cls):
    for block in model.blocks:
        block.mlp = cls(block.mlp)
    return model


def test_a_sublayer_without_the_hook_decodes_by_recomputation():
    model = _swap_mlps(random_model(VARIANTS["cem_att_T1"]), NoHookMLP)
    assert missing_hooks(model) == ["mlp 'llama' (built-in) has no decode"]
    cache = new_cache(model)
    assert cache.recompute
    ids = token_ids()
    assert (cached_logits(model, ids, 4) - model(ids).detach()).abs().max().item() < 1e-12


@pytest.mark.parametrize("cls, message", [(BrokenHookMLP, "returned"), (RaisingHookMLP, "RuntimeError")])
def test_a_broken_hook_is_one_error_naming_it(cls, message):
    model = _swap_mlps(random_model({}), cls)
    with pytest.raises(DecodingHookError, match=f"{cls.__name__}.decode .*{message}"):
        decode(model, token_ids(seq=4), new_cache(model))


def test_cache_type_is_the_documented_one():
    assert isinstance(new_cache(random_model({})), DecodingCache)
