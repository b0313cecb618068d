"""Pairing by seed is checked on the models training builds (study.pairing)."""

import copy
import random

import torch

from cem_ablate.study.pairing import check_pairing, pair_study
from cem_ablate.study.spec import parse_study
from cem_ablate.study.variants import expand
from tests.study.tiny_study import TINY_BASE


def variants(sets: dict, baseline: dict, **base_changes):
    base = copy.deepcopy(TINY_BASE)
    for section, values in base_changes.items():
        base[section] |= values
    mapping = {
        "name": "pairing",
        "base": base,
        "variants": [{"name": n, "set": s} for n, s in sets.items()],
        "baselines": {"base": baseline},
    }
    return expand(parse_study(mapping), mapping).variants


def test_depths_of_one_layer_are_paired_and_different_layers_are_not():
    one = {"model.attention": {"name": "cem", "steps": 1}}
    two = {"model.attention": {"name": "cem", "steps": 2}}
    depth = variants({"T2": two}, one)
    ((key, pairing),) = pair_study(depth).items()
    assert key[1] == "base" and pairing.paired and pairing.label == "paired", pairing

    layers = variants({"cem": {"model.attention": "cem"}}, {"model.attention": "llama"})
    ((_, pairing),) = pair_study(layers).items()
    assert not pairing.paired and "start different" in pairing.reason, pairing


def test_another_data_order_is_never_paired():
    same_model = variants({"cem": {"model.attention": "cem", "train.batch_size": 8}}, {"train.batch_size": 4})
    cem, base = same_model[0], same_model[1]
    assert cem.config.model == base.config.model
    pairing = check_pairing(cem.config, base.config)
    assert not pairing.paired and "data order" in pairing.reason


def test_the_check_leaves_the_random_state_alone():
    torch.manual_seed(123)
    random.seed(5)
    expected = (torch.rand(3), random.random())
    torch.manual_seed(123)
    random.seed(5)
    cem, llama = variants({"cem": {"model.attention": "cem"}}, {"model.attention": "llama"})
    check_pairing(cem.config, llama.config)
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]
