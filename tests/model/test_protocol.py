"""The component protocol: the defaults of what a component may provide, the checks of
what it must, and the built-in zoo against both."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from cem_ablate import build_model, registry
from cem_ablate.config.dims import ModelDims
from cem_ablate.config.errors import ConfigError
from cem_ablate.config.schema import Validated, parse
from cem_ablate.model import protocol
from cem_ablate.model.blocks import RMSNorm

DIMS = ModelDims(d_model=16, n_layers=1, n_heads=2, d_mlp=24, vocab_size=11, max_seq_len=8)


class Minimal(nn.Module):
    """Only what a component must provide."""

    def __init__(self, dims=DIMS, options=None, steps=1):
        super().__init__()
        self.norm = RMSNorm(dims.d_model)

    def forward(self, h):
        return h + self.norm(h)

    def flops_per_token(self, seq_len):
        return 10.0


class Counted(Minimal):
    supports_recursion = True

    def backward_flops_per_token(self, seq_len):
        return 7.0


def _spec(factory, kind="attention", source="plugin p (p_module)"):
    return registry.ComponentSpec(kind, "x", factory, None, "test", source)


def test_defaults_of_the_optional_capabilities():
    minimal, counted = Minimal(), Counted()
    assert protocol.supports_recursion(Minimal) is False and protocol.supports_recursion(Counted) is True
    assert protocol.supports_recursion(lambda dims, options, steps: Minimal()) is False
    assert protocol.backward_flops_per_token(minimal, 8) == 20.0  # 2 x forward
    assert protocol.backward_flops_per_token(counted, 8) == 7.0
    assert protocol.tracks_energy(minimal) is False
    assert protocol.resolved_kernel(minimal, torch.device("cpu")) == "torch"
    assert protocol.missing_joint_step(Minimal) == ("step_context", "direction")


def test_option_hooks_are_called_when_defined_and_skipped_otherwise():
    calls = []

    @dataclass(frozen=True)
    class Hooked:
        width: int = 1

        def validate(self, path):
            calls.append(("validate", path))

        def check_dims(self, dims, path):
            calls.append(("dims", dims.d_model, path))

        def check_steps(self, steps, path):
            calls.append(("steps", steps, path))

    @dataclass(frozen=True)
    class Plain:
        width: int = 1

    hooked = parse(Hooked, {"width": 2}, "model.mlp")
    assert isinstance(hooked, Validated) and not isinstance(Plain(), Validated)
    protocol.check_dims(hooked, DIMS, "model.mlp")
    protocol.check_steps(hooked, 3, "model.mlp")
    for options in (parse(Plain, {}, "model.mlp"), None):  # no hooks, no options: nothing to check
        protocol.check_dims(options, DIMS, "model.mlp")
        protocol.check_steps(options, 3, "model.mlp")
    assert calls == [("validate", "model.mlp"), ("dims", 16, "model.mlp"), ("steps", 3, "model.mlp")]


def test_the_contract_names_what_a_class_lacks():
    class NoFlops(nn.Module):
        def forward(self, h):
            return h

    class NoForward(nn.Module):
        def flops_per_token(self, seq_len):
            return 1.0

    class NotAModule:
        def forward(self, h):
            return h

        def flops_per_token(self, seq_len):
            return 1.0

    assert protocol.sublayer_contract(_spec(Minimal)) is None
    assert protocol.sublayer_contract(_spec(NoFlops)) == "NoFlops defines no flops_per_token"
    assert protocol.sublayer_contract(_spec(NoForward)) == "NoForward defines no forward"
    assert protocol.sublayer_contract(_spec(NotAModule)) == "NotAModule is not a torch.nn.Module"
    assert protocol.sublayer_contract(_spec(lambda dims, options, steps: None)) is None  # checked when built


def test_a_function_factory_is_checked_on_what_it_builds():
    spec = _spec(lambda dims, options, steps: nn.Identity())
    with pytest.raises(ConfigError) as info:
        protocol.check_built(spec.factory(DIMS, None, 1), spec, "model.attention.name")
    assert info.value.path == "model.attention.name"
    assert "plugin p (p_module)" in str(info.value) and "Identity" in str(info.value)
    module = Minimal()
    assert protocol.check_built(module, spec, "model.attention.name") is module


def test_registration_checks_the_generic_contract():
    with pytest.raises(registry.ContractError, match="not callable"):
        registry.register("mlp", "not_callable_test", description="x")(42)
    with pytest.raises(registry.ContractError, match="not a dataclass type"):
        registry.register("mlp", "dict_options_test", options=dict, description="x")(Minimal)
    assert "not_callable_test" not in registry.names("mlp") and "dict_options_test" not in registry.names("mlp")


@pytest.mark.parametrize("attention, mlp", [("llama", "llama"), ("cem", "cem"), ("cem", "cem_param_matched")])
def test_the_builtin_zoo_follows_the_protocol(attention, mlp):
    model = build_model(
        {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_mlp": 24, "vocab_size": 11, "attention": attention, "mlp": mlp}
    ).double()
    for kind in ("attention", "mlp"):
        module = getattr(model.blocks[0], kind)
        spec = registry.get(kind, module_name := (attention if kind == "attention" else mlp))
        assert protocol.sublayer_contract(spec) is None, module_name
        assert isinstance(module, protocol.Sublayer) and isinstance(module.norm, RMSNorm)
        assert protocol.missing_joint_step(spec.factory) == ()  # usable in block: parallel
        if module_name != "llama":  # energy sublayers give the block's energy trace too
            assert isinstance(module, protocol.JointStep)
        assert protocol.tracks_energy(module) == (module_name != "llama")
        assert protocol.supports_recursion(spec.factory) == (module_name != "llama")
        h = torch.randn(2, 5, 16, dtype=torch.float64)
        assert module(h).shape == h.shape
    cem_kernel = protocol.resolved_kernel(model.blocks[0].attention, torch.device("cpu"))
    assert cem_kernel == ("torch" if attention == "llama" else "blocked")
