"""The eval section decides each metric by its own direction with the perplexity rule."""

from types import SimpleNamespace

import numpy as np

from cem_ablate.analysis.decision import Design
from cem_ablate.reporting.eval_report import eval_tests, higher_is_better


def comparisons(paired: bool):
    test = SimpleNamespace(at="baseline lr*", lr_variant=1e-3, lr_baseline=1e-3, paired=paired)
    row = SimpleNamespace(variant="cem", baseline="llama", test=test)
    return SimpleNamespace(rows=[row], design=Design.fixed(5, 0.05), correction="holm")


def test_direction_of_each_metric():
    assert higher_is_better("eval/hellaswag/acc_norm") and higher_is_better("eval/x/acc")
    assert not higher_is_better("eval/wikitext/word_perplexity") and not higher_is_better("eval/w/bits_per_byte")


def test_higher_accuracy_is_better_and_higher_perplexity_worse():
    rng = np.random.default_rng(0)
    base_acc, base_ppl = rng.uniform(0.3, 0.4, 5), rng.uniform(20, 30, 5)
    values = {
        ("llama", "eval/t/acc"): {1e-3: dict(enumerate(base_acc))},
        ("cem", "eval/t/acc"): {1e-3: {s: v + 0.1 + rng.normal(0, 0.005) for s, v in enumerate(base_acc)}},
        ("llama", "eval/t/word_perplexity"): {1e-3: dict(enumerate(base_ppl))},
        ("cem", "eval/t/word_perplexity"): {1e-3: {s: v + 2 + rng.normal(0, 0.1) for s, v in enumerate(base_ppl)}},
    }
    tests = {
        metric: d for _, metric, d in eval_tests(comparisons(True), values, ["eval/t/acc", "eval/t/word_perplexity"])
    }
    acc, ppl = tests["eval/t/acc"], tests["eval/t/word_perplexity"]
    assert acc.verdict == "better" and 0.09 < acc.delta < 0.11 and acc.low < acc.delta < acc.high
    assert ppl.verdict == "worse" and 1.8 < ppl.delta < 2.2 and ppl.low < ppl.delta < ppl.high
    assert acc.p_holm >= acc.p_design and acc.n_pairs == 5


def test_missing_scores_are_unresolved():
    values = {("cem", "eval/t/acc"): {1e-3: {0: 0.5}}}
    ((_, _, d),) = eval_tests(comparisons(False), values, ["eval/t/acc"])
    assert d.verdict == "unresolved" and d.delta is None
