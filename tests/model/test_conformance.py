"""The conformance check on the built-in zoo: every attention and MLP passes, and the
FLOP convention it checks is the one Llama's count (and so the bench's) follows."""

import pytest

from cem_ablate import registry
from cem_ablate.model.conformance import (
    FLOP_LENGTHS,
    build_component,
    causal_flops_per_token,
    check_component,
    measured_flops_per_token,
)


@pytest.mark.parametrize("kind", ["attention", "mlp"])
def test_every_built_in_component_passes(kind):
    for name in registry.names(kind):
        spec = registry.get(kind, name)
        # the zoo's own (other test modules register throwaway components beside it in one session)
        if spec.source != "built-in" or not spec.factory.__module__.startswith("components."):
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


def test_the_reference_page_s_worked_example_is_the_model_report_s_count():
    from pathlib import Path

    from cem_ablate import build_model
    from cem_ablate.model import model_report

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "components.md").read_text()
    model = build_model({"size": "tiny", "max_seq_len": 128})
    assert model.dims.d_model == 64
    counted = model_report(model, seq_len=128).flops_by_module["blocks.0.attention"]
    assert counted == 2 * 4 * 64**2 + 2 * 2 * 64 * 129 / 2 == 49_280
    assert "**49,280**" in page
