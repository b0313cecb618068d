"""The component contract: what an attention or MLP component must and may provide.

A component is registered under a kind (`attention`, `mlp`) with a typed options
dataclass (`cem_ablate.registry.register`). The model builds it as

    factory(dims: ModelDims, options: <its options dataclass> | None, steps: int) -> nn.Module

`steps` is the recursion steps T it runs itself (1 unless it declares
`supports_recursion`; under `depth_mode: reuse` the block repeats it instead, SPEC §5).

MUST (`Sublayer`):
    forward(h) -> h'               the residual stream (B, J, D) -> (B, J, D), its own
                                   norm and residual included (CEM absorbs the residual
                                   into its recursion, SPEC §2)
    flops_per_token(seq_len)       forward FLOPs per token (recursion steps included)

MAY, each with its default here and nowhere else:
    supports_recursion = False     class attribute: runs `steps` > 1 itself
    backward_flops_per_token(seq_len)   default 2 x forward (SPEC §2: `backprop_steps`
                                   k < T differentiates fewer steps, so CEM says less)
    energy(x, h) -> (B,), track_energy, energy_trace
                                   the energy of each recursion step, recorded while
                                   `track_energy` is set (SPEC §2-§3); default: none
    resolved_kernel(device) -> str the attention kernel it runs on `device` (bench
                                   metadata); default: none ("torch")
    JointStep                      the Energy-Transformer joint step (SPEC §11.3)
    parameter_classes() -> {name: class}
                                   the muP class of its parameters (names relative to the
                                   module, any submodule's included; classes in
                                   `model.parametrization`); default: inferred from shapes

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
    """A sublayer that descends an energy and can record it per step (SPEC §2-§3)."""

    track_energy: bool  # record `energy_trace` on the next forward passes
    energy_trace: list[float]  # mean energy of each recursion step of the last forward

    def energy(self, x: Tensor, h: Tensor) -> Tensor: ...  # (B,): E(x | context of h)


@runtime_checkable
class KernelChoice(Protocol):
    def resolved_kernel(self, device: torch.device) -> str: ...


@runtime_checkable
class JointStep(Protocol):
    """The joint step of the Energy-Transformer parallel block (SPEC §11.3).

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


def tracks_energy(module: nn.Module) -> bool:
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
    missing = [name for name, inherited in (("forward", nn.Module.forward), ("flops_per_token", None))
               if getattr(factory, name, inherited) is inherited]
    return f"{factory.__name__} defines no {' and no '.join(missing)}" if missing else None


def check_built(module: Any, spec: registry.ComponentSpec, path: str) -> Sublayer:
    """The built module follows the contract, or a ConfigError naming where it came from."""
    if isinstance(module, nn.Module) and isinstance(module, Sublayer):
        return module
    raise ConfigError(path, f"{spec.kind} component {spec.name!r} ({spec.source}) built a "
                      f"{type(module).__name__}, not an nn.Module with forward and flops_per_token.")


for _kind in SUBLAYER_KINDS:
    registry.declare_kind(_kind, sublayer_contract)
