"""scripts/cross_report_contrasts.py: the secondary contrasts the results pages quote, read from
the committed reports (docs/figures/*/report.md), equal the platform's rule applied by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tests.analysis.scripts import load_script


@pytest.fixture(scope="module")
def contrasts():
    return load_script("cross_report_contrasts")


def test_every_contrast_has_a_test_and_the_paired_ones_match_scipy(contrasts):
    rows = dict(contrasts.contrasts())
    assert len(rows) == 5 and all(d.p is not None for d in rows.values())
    arm = {a: contrasts.paired_delta("readings_cpu", f"{a}_T2", f"{a}_T1") for a in "AD"}
    diffs = np.array([arm["D"][s] - arm["A"][s] for s in sorted(arm["A"])])
    d = next(d for name, d in rows.items() if "arm D" in name)
    assert d.delta == pytest.approx(diffs.mean()) and d.p == pytest.approx(stats.ttest_1samp(diffs, 0).pvalue)


def test_welch_contrast_matches_scipy(contrasts):
    v = contrasts.per_seed("readings_cpu", "B_T1")
    b = contrasts.per_seed("fig4_attention_recursion_vs_reuse_cpu600", "llama,size=tiny")
    assert sorted(v) == sorted(b) == [0, 1, 2]
    d = dict(contrasts.contrasts())["Fig. 2a's CEM attention (readings arm B_T1) - Llama, 600 steps"]
    assert d.p == pytest.approx(stats.ttest_ind(list(v.values()), list(b.values()), equal_var=False).pvalue)
