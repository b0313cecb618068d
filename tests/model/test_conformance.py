"""The conformance check on the built-in zoo: every attention and MLP passes, and the
FLOP convention it checks is the one Llama's count (and so the bench's) follows."""

import pytest

from cem_ablate import registry
from cem_ablate.model.conformance import (FLOP_LENGTHS, build_component, causal_flops_per_token,
                                          check_component, measured_flops_per_token)


@pytest.mark.parametrize("kind", ["attention", "mlp"])
def test_every_built_in_component_passes(kind):
    for name in registry.names(kind):
        if registry.get(kind, name).source != "built-in":
            continue
        result = check_component(kind, name)
        assert result.failures == (), result.failures


def test_llama_attention_flops_are_the_causal_half_of_what_the_counter_sees():
    attention = build_component("attention", "llama")
    d, (j1, j2) = 32, FLOP_LENGTHS
    # FlopCounterMode: four D x D projections and every query against every key (q·k, p·v)
    assert measured_flops_per_token(attention, j2) == 8 * d * d + 4 * j2 * d
    assert measured_flops_per_token(attention, j1) == 8 * d * d + 4 * j1 * d
    # the convention: a token at position i attends to i keys, (J + 1) / 2 on average
    assert causal_flops_per_token(attention, 128) == attention.flops_per_token(128) == 8 * d * d + 2 * 129 * d
