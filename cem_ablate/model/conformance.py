"""A registered attention or MLP component checked against the contract on tiny inputs
(docs/reference/components.md, "The contract"; `cem-ablate components --check NAME`,
and every plugin component a study uses, before the study starts).

In float64, on a one-block model of `CHECK_DIMS` built through the config path (the
component's default options):

- shape: `forward(h)` maps (B, J, D) to (B, J, D) of h's dtype, finite;
- causality: new values of the tokens from position t on change no output before t;
- decode: where the component has `decode`, a prefill then one token at a time gives
  what `forward` gives the whole sequence (`DECODE_TOLERANCE`);
- FLOPs: `flops_per_token(J)` against the matrix-product FLOPs that
  `torch.utils.flop_counter.FlopCounterMode` counts for `forward`. The counter sees
  every query against every key (a mask does not remove products), the convention
  counts the causal half: token i attends to i keys, (J + 1) / 2 on average. So the
  count per token is measured at two lengths, written a + b·J (projections a, attention
  b per key), and compared at J = `FLOP_LENGTHS[1]` with a + b·(J + 1) / 2, within
  `FLOP_TOLERANCE` (relative). Elementwise work (norms, softmax, RoPE) is in neither.

Each failure is one line naming the component and what failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from cem_ablate.model import protocol

CHECK_DIMS = {"d_model": 32, "n_layers": 1, "n_heads": 4, "d_mlp": 48, "vocab_size": 11, "max_seq_len": 32}
SEQ_LEN = 12  # causality and decode
BATCH = 2
PREFILL = 5  # decode: this many tokens at once, then one at a time
CAUSAL_TOLERANCE = 1e-9  # float64: a past output moved by more than rounding
DECODE_TOLERANCE = 1e-7  # float64: decode's arithmetic may be ordered differently from forward's
FLOP_LENGTHS = (8, 16)
FLOP_TOLERANCE = 0.02  # relative: both sides count the same matrix products


@dataclass(frozen=True)
class ConformanceResult:
    label: str  # "attention 'llama' (built-in)"
    failures: tuple[str, ...]  # one line each
    notes: tuple[str, ...]  # what is optional and absent, e.g. no decode
    checked: tuple[str, ...] = ()  # the checks that ran: shape, causality, decode (if it has one), flops_per_token

    @property
    def passed(self) -> bool:
        return not self.failures


def build_component(kind: str, name: str, dims: dict | None = None) -> torch.nn.Module:
    """The component `kind`/`name` with its default options, as the model builds it (float64)."""
    from cem_ablate.model.assembly import build_model
    from cem_ablate.model.config import parse_model_config

    model = build_model(parse_model_config({**(dims or CHECK_DIMS), kind: name}))
    return getattr(model.blocks[0], kind).double().eval()


def check_component(kind: str, name: str) -> ConformanceResult:
    """Every check of the module docstring on `kind`/`name`; a component that does not
    build with its default options fails that, in one line."""
    from cem_ablate import registry

    spec = registry.get(kind, name, f"model.{kind}")
    label = f"{kind} {name!r} ({spec.source})"
    try:
        module = build_component(kind, name)
    except Exception as err:  # noqa: BLE001 - a plugin's constructor: any failure is one line
        return ConformanceResult(
            label,
            (f"{label}: does not build with its default options: {type(err).__name__}: {err}".splitlines()[0],),
            (),
        )
    decodes = protocol.decodes(module)
    checks = {
        "shape": _shape,
        "causality": _causality,
        **({"decode": _decode} if decodes else {}),
        "flops_per_token": _flops,
    }
    notes = (
        ()
        if decodes
        else (
            f"{label}: no decode: generation recomputes the whole prefix for every token "
            "(optional; model/protocol.py IncrementalDecoding)",
        )
    )
    failures = []
    for name, check in checks.items():
        try:
            line = check(module)
        except Exception as err:  # noqa: BLE001 - the component raised inside the check
            line = f"{name}: raised {type(err).__name__}: {err}".splitlines()[0]
        if line:
            failures.append(f"{label}: {line}")
            if name == "shape":  # the other checks read outputs of that shape
                break
    return ConformanceResult(label, tuple(failures), notes, tuple(checks))


def _inputs(seed: int, length: int = SEQ_LEN) -> Tensor:
    return torch.randn(
        BATCH, length, CHECK_DIMS["d_model"], dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    )


@torch.no_grad()
def _shape(module) -> str | None:
    h = _inputs(0)
    y = module(h)
    if not isinstance(y, Tensor) or y.shape != h.shape or y.dtype != h.dtype:
        return (
            f"forward maps {tuple(h.shape)} {h.dtype} to {getattr(y, 'shape', type(y).__name__)} "
            f"{getattr(y, 'dtype', '')}; it must return the new residual stream of the input's shape and dtype"
        )
    if not torch.isfinite(y).all():
        return "forward returns non-finite values on a random input"
    return None


@torch.no_grad()
def _causality(module) -> str | None:
    h = _inputs(0)
    y = module(h)
    for t in (1, SEQ_LEN // 2, SEQ_LEN - 1):
        changed = h.clone()
        changed[:, t:] = _inputs(1)[:, t:]
        moved = (module(changed)[:, :t] - y[:, :t]).abs().amax(dim=(0, 2))
        if moved.max() > CAUSAL_TOLERANCE:
            first = int((moved > CAUSAL_TOLERANCE).nonzero()[0])
            return (
                f"not causal: changing the tokens from position {t} on changes the output at position {first} "
                f"(max |Δ| {moved.max().item():.3g}); apply the causal mask"
            )
    return None


@torch.no_grad()
def _decode(module) -> str | None:
    h = _inputs(2)
    full = module(h)
    out, state = protocol.decode(module, h[:, :PREFILL], None, 0)
    outs = [out]
    for t in range(PREFILL, SEQ_LEN):
        out, state = protocol.decode(module, h[:, t : t + 1], state, t)
        outs.append(out)
    diff = (torch.cat(outs, dim=1) - full).abs().amax(dim=(0, 2))
    if diff.max() > DECODE_TOLERANCE:
        first = int((diff > DECODE_TOLERANCE).nonzero()[0])
        return (
            f"decode differs from forward: at position {first} (max |Δ| {diff.max().item():.3g} over positions, "
            f"prefill {PREFILL} then one token at a time)"
        )
    return None


def measured_flops_per_token(module, length: int) -> float:
    """Matrix-product FLOPs per token of `module.forward` on (1, length, D), as
    FlopCounterMode counts them (every query against every key)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    # In-place baddbmm_ (scores added onto a bias) has no formula of its own: baddbmm's.
    counter = FlopCounterMode(display=False, custom_mapping={torch.ops.aten.baddbmm_: _baddbmm_flops})
    # The CPU's fused SDPA kernel has no FLOP formula in the counter (it would count 0);
    # the math backend runs it as matrix products the counter sees.
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        module(_inputs(3, length)[:1])
    return counter.get_total_flops() / length


def _baddbmm_flops(bias_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    batch, m, k = a_shape
    return 2 * batch * m * k * b_shape[-1]


def causal_flops_per_token(module, length: int) -> float:
    """The convention's count at `length` from two measured lengths: a + b·(J + 1)/2."""
    j1, j2 = FLOP_LENGTHS
    m1, m2 = measured_flops_per_token(module, j1), measured_flops_per_token(module, j2)
    per_key = (m2 - m1) / (j2 - j1)
    return m1 - per_key * j1 + per_key * (length + 1) / 2


@torch.no_grad()
def _flops(module) -> str | None:
    length = FLOP_LENGTHS[1]
    expected = causal_flops_per_token(module, length)
    declared = float(module.flops_per_token(length))
    if not math.isfinite(declared) or abs(declared - expected) > FLOP_TOLERANCE * max(abs(expected), 1.0):
        return (
            f"flops_per_token({length}) = {declared:.6g}, but FlopCounterMode counts {expected:.6g} "
            f"(matrix products per token, causal half of the attention; tolerance {FLOP_TOLERANCE:.0%})"
        )
    return None
