"""The component contract: what an attention or MLP component must and may provide.

A component is registered under a kind (`attention`, `mlp`) with a typed options
dataclass (`cem_ablate.registry.register`). The model builds it as

    factory(dims: ModelDims, options: <its options dataclass> | None, steps: int) -> nn.Module

`steps` is the recursion steps T it runs itself (1 unless it declares
`supports_recursion`; under `depth_mode: reuse` the block repeats it instead, docs/design/layers.md#s5-plain-layer-reuse).

MUST (`Sublayer`):
    forward(h) -> h'               the residual stream (B, J, D) -> (B, J, D), its own
                                   norm and residual included (CEM absorbs the residual
                                   into its recursion, docs/design/layers.md#s2-cem-attention)
    flops_per_token(seq_len)       forward FLOPs per token (recursion steps included)

MAY, each with its default here and nowhere else:
    supports_recursion = False     class attribute: runs `steps` > 1 itself
    backward_flops_per_token(seq_len)   default 2 x forward (docs/design/layers.md#s2-cem-attention: `backprop_steps`
                                   k < T differentiates fewer steps, so CEM says less)
    energy(x, h) -> (B,), track_energy, energy_trace
                                   the energy of each recursion step, recorded while
                                   `track_energy` is set (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp); default: none
    resolved_kernel(device) -> str the attention kernel it runs on `device` (bench
                                   metadata); default: none ("torch")
    JointStep                      the Energy-Transformer joint step (docs/design/energy-lens.md#s11-3-energy-transformer-block)
    parameter_classes() -> {name: class}
                                   the muP class of its parameters (names relative to the
                                   module, any submodule's included; classes in
                                   `model.parametrization`); default: inferred from shapes
    decode(h, past, position) -> (h', state)
                                   incremental decoding with a cache (`IncrementalDecoding`,
                                   model/decoding.py); default: none, and a model with such a
                                   sublayer decodes by recomputing the whole prefix
    decode_context(c, past, position) -> (ctx, state)
                                   the same for the joint step of `block: parallel`

The options dataclass MAY define (`config.schema.Validated`, `DimsChecked`,
`StepsChecked`; default: no check):
    validate(path)                 its own values, once when parsed
    check_dims(dims, path)         against the model sizes (e.g. heads divide D)
    check_steps(steps, path)       against the recursion steps T (e.g. backprop_steps <= T)

Every check raises `ConfigError` naming the key path. The core only calls components
through the functions below, so a plugin that provides nothing optional still works.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from cem_ablate import registry
from cem_ablate.config.dims import ModelDims
from cem_ablate.config.errors import ConfigError

SUBLAYER_KINDS = ("attention", "mlp")


# -- must ------------------------------------------------------------------------------
@runtime_checkable
class Sublayer(Protocol):
    """A built attention or MLP component (an nn.Module)."""

    def forward(self, h: Tensor) -> Tensor: ...

    def flops_per_token(self, seq_len: int) -> float: ...


class SublayerFactory(Protocol):
    """What is registered: usually the nn.Module class itself."""

    def __call__(self, dims: ModelDims, options: Any, steps: int) -> Sublayer: ...


# -- may (capabilities) -------------------------------------------------------------------
@runtime_checkable
class Recursive(Protocol):
    """A factory (class) whose modules run T recursion steps themselves."""

    supports_recursion: bool


@runtime_checkable
class BackwardFlops(Protocol):
    def backward_flops_per_token(self, seq_len: int) -> float: ...


@runtime_checkable
class EnergyTracking(Protocol):
    """A sublayer that descends an energy and can record it per step (docs/design/layers.md#s2-cem-attention to docs/design/layers.md#s3-cem-mlp)."""

    track_energy: bool  # record `energy_trace` on the next forward passes
    energy_trace: list[float]  # mean energy of each recursion step of the last forward

    def energy(self, x: Tensor, h: Tensor) -> Tensor: ...  # (B,): E(x | context of h)


@runtime_checkable
class KernelChoice(Protocol):
    def resolved_kernel(self, device: torch.device) -> str: ...


@runtime_checkable
class JointStep(Protocol):
    """The joint step of the Energy-Transformer parallel block (docs/design/energy-lens.md#s11-3-energy-transformer-block).

    The block normalizes once with the attention's `norm`, computes each sublayer's
    `step_context` once from c = RMSNorm(h), and then takes T steps
    x <- x + direction_att(u, ctx_att) + direction_mlp(u, ctx_mlp) at u = RMSNorm(x)
    (u = c at the first step).
    """

    norm: nn.Module  # the sublayer's RMSNorm (the block uses the attention's)

    def step_context(self, c: Tensor) -> Any:
        """Computed once per block from c = RMSNorm(h): keys/values (attention),
        gamma = W c (CEM MLP), None (SwiGLU, hopfield)."""
        ...

    def direction(self, u: Tensor, ctx: Any) -> Tensor:
        """eta * Delta(u): the (preconditioned, step-size-scaled) update at the query
        state u, shape (B, J, D). Llama sublayers: their output increment at u
        (Attn(u) with keys/values from ctx; SwiGLU(u))."""
        ...

    def step_energy(self, u: Tensor, ctx: Any) -> Tensor:
        """Energy per sequence (B,) at u, for the energy trace (CEM and hopfield;
        Llama sublayers may raise NotImplementedError or omit it: the step itself needs
        only `norm`, `step_context` and `direction`, see `missing_joint_step`)."""
        ...


@runtime_checkable
class ParameterClasses(Protocol):
    """A module (a component or any of its submodules) that declares the muP class of its
    parameters (`cem_ablate.model.parametrization`: hidden, vector, low_rank_factor, ...)."""

    def parameter_classes(self) -> Mapping[str, str]: ...


@runtime_checkable
class IncrementalDecoding(Protocol):
    """A sublayer that decodes new tokens given what it kept of the earlier ones.

    `decode(h, past, position)`: h (B, J, D) is the residual stream of J new tokens at
    positions `position` .. `position` + J - 1; `past` is the state this method returned
    for the tokens before them (None before the first call). Returns the new stream
    (B, J, D), equal to what `forward` gives those positions of the whole sequence, and
    the state after these tokens: None, a tensor, or a tuple/list/dict of tensors, each
    with the batch in dim 0 (the cache counts its bytes and selects batch rows).
    A position-wise sublayer (every MLP) returns `(forward(h), None)`.
    """

    def decode(self, h: Tensor, past: Any, position: int) -> tuple[Tensor, Any]: ...


@runtime_checkable
class JointStepDecoding(Protocol):
    """`block: parallel` decoding: `decode_context(c, past, position)` is `step_context`
    for the J new tokens' normalized input c (B, J, D) given the state `past`; it returns
    (ctx, state), and `direction(u, ctx)` of the new tokens' query states u must accept
    that ctx. State rules as for `IncrementalDecoding`."""

    def decode_context(self, c: Tensor, past: Any, position: int) -> tuple[Any, Any]: ...


class DecodingHookError(ConfigError):
    """A sublayer's decoding hook raised or returned something outside the contract;
    the message names its class and module (the CLI prints it as one `error:` line)."""


@runtime_checkable
class DimsChecked(Protocol):
    def check_dims(self, dims: ModelDims, path: str) -> None: ...


@runtime_checkable
class StepsChecked(Protocol):
    def check_steps(self, steps: int, path: str) -> None: ...


# -- the defaults, in one place -------------------------------------------------------------
def supports_recursion(factory: Any) -> bool:
    return bool(factory.supports_recursion) if isinstance(factory, Recursive) else False


def backward_flops_per_token(module: Sublayer, seq_len: int) -> float:
    if isinstance(module, BackwardFlops):
        return module.backward_flops_per_token(seq_len)
    return 2.0 * module.flops_per_token(seq_len)


def tracks_energy(module: object) -> bool:
    return isinstance(module, EnergyTracking)


def resolved_kernel(module: nn.Module, device: torch.device) -> str:
    return module.resolved_kernel(device) if isinstance(module, KernelChoice) else "torch"


def missing_joint_step(factory: Any) -> tuple[str, ...]:
    """The JointStep methods a registered factory lacks, for a `block: parallel` config
    error naming them. `step_energy` is not among them: only the energy trace uses it,
    which the block records only for sublayers that track energy (Llama has none)."""
    return tuple(name for name in ("step_context", "direction") if not callable(getattr(factory, name, None)))


def declared_parameter_classes(module: nn.Module) -> Mapping[str, str]:
    """A module's declared parameter classes ({} when it declares none: inferred from shapes)."""
    return module.parameter_classes() if isinstance(module, ParameterClasses) else {}


def decodes(module: nn.Module, joint: bool = False) -> bool:
    """Whether `module` has the decoding hook a block needs (`decode_context` in a
    parallel block, else `decode`)."""
    return isinstance(module, JointStepDecoding if joint else IncrementalDecoding)


def _hook_name(module: nn.Module, hook: str) -> str:
    return f"{type(module).__name__}.{hook} ({type(module).__module__})"


def _checked_state(state: Any, module: nn.Module, hook: str) -> Any:
    tensors = state.values() if isinstance(state, dict) else state if isinstance(state, (tuple, list)) else [state]
    if state is not None and not all(isinstance(t, Tensor) for t in tensors):
        raise DecodingHookError(
            _hook_name(module, hook),
            "returned a state that is not None, a tensor or a "
            "tuple/list/dict of tensors (model/protocol.py IncrementalDecoding).",
        )
    return state


def decode(module: Any, h: Tensor, past: Any, position: int) -> tuple[Tensor, Any]:
    """`module.decode`, checked: anything it raises, or an output of the wrong shape,
    becomes one DecodingHookError naming it."""
    try:
        out = module.decode(h, past, position)
        y, state = out
    except Exception as err:  # a plugin's hook: anything it raises is its failure
        raise DecodingHookError(_hook_name(module, "decode"), f"failed: {type(err).__name__}: {err}") from err
    if not isinstance(y, Tensor) or y.shape != h.shape:
        raise DecodingHookError(
            _hook_name(module, "decode"),
            f"returned {getattr(y, 'shape', type(y).__name__)} for an input of shape "
            f"{tuple(h.shape)}; it must return (the new stream of that shape, a state).",
        )
    return y, _checked_state(state, module, "decode")


def decode_context(module: Any, c: Tensor, past: Any, position: int) -> tuple[Any, Any]:
    """`module.decode_context`, checked like `decode`."""
    try:
        ctx, state = module.decode_context(c, past, position)
    except Exception as err:
        raise DecodingHookError(_hook_name(module, "decode_context"), f"failed: {type(err).__name__}: {err}") from err
    return ctx, _checked_state(state, module, "decode_context")


def check_dims(options: Any, dims: ModelDims, path: str) -> None:
    if isinstance(options, DimsChecked):
        options.check_dims(dims, path)


def check_steps(options: Any, steps: int, path: str) -> None:
    if isinstance(options, StepsChecked):
        options.check_steps(steps, path)


# -- enforcement ----------------------------------------------------------------------------
def sublayer_contract(spec: registry.ComponentSpec) -> str | None:
    """What a registered attention/MLP factory lacks (None: nothing). A class must be
    an nn.Module defining forward and flops_per_token; a plain function is checked on
    what it builds (`check_built`)."""
    factory = spec.factory
    if not isinstance(factory, type):
        return None
    if not issubclass(factory, nn.Module):
        return f"{factory.__name__} is not a torch.nn.Module"
    missing = [
        name
        for name, inherited in (("forward", nn.Module.forward), ("flops_per_token", None))
        if getattr(factory, name, inherited) is inherited
    ]
    return f"{factory.__name__} defines no {' and no '.join(missing)}" if missing else None


def check_built(module: Any, spec: registry.ComponentSpec, path: str) -> Sublayer:
    """The built module follows the contract, or a ConfigError naming where it came from."""
    if isinstance(module, nn.Module) and isinstance(module, Sublayer):
        return module
    raise ConfigError(
        path,
        f"{spec.kind} component {spec.name!r} ({spec.source}) built a "
        f"{type(module).__name__}, not an nn.Module with forward and flops_per_token.",
    )


for _kind in SUBLAYER_KINDS:
    registry.declare_kind(_kind, sublayer_contract)
