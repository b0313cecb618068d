"""Sequential seeds (`seeds: {min, max, until: resolved}`).

When every planned trial is final, each variant whose Δ against a baseline is still
unresolved gets one more seed, and so does that baseline, up to `max`; the
coordinator then runs the new slots and asks again. "Resolved" is the verdict the
report prints: the study's whole family of tests (`study.verdicts.study_family`,
Holm at `statistics: {alpha, correction}`) on p-values corrected for the seed
design's looks (`study.verdicts.design_of`: every look is tested at α / K, K = looks
× tests per look, `at: both` testing two grid points). A pair whose own test passes
α / K but whose Holm-adjusted p does not is therefore bought another seed rather
than stopped and then printed unresolved (seen in Fig. 2c and Fig. 4, docs/results/figure-2.md).

Why stopping on the family verdict keeps the error rates: each test's design p,
K·p at the look where its pair stopped, is at least K·min over looks of p, so under
the null P(K·p ≤ u) ≤ Σ_looks u/K = u whatever rule chose the stopping look (one
that looks at the other pairs included); Holm over valid p-values holds the
family-wise rate at α under any dependence between them. Simulated in
tests/study/test_seeds.py (family-wise false positives of null pairs stopped this way).

The Δ(s) that decide are `seeds.at`'s: at the baseline's lr* grid point, the
variant's own, or both, each the study's test for the pair (paired t where
`study.pairing` found the pair paired, else Welch). A Δ with no test at all (the
variant diverged at that learning rate) is not something more seeds resolve: it is
left alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cem_ablate.analysis.statistics import observations, variant_stats
from cem_ablate.study.session_protocols import StudyOfVariants
from cem_ablate.study.spec import SequentialSeeds
from cem_ablate.study.verdicts import AT_BASELINE, AT_OWN, Test, design_of, headline, study_family

if TYPE_CHECKING:
    from cem_ablate.study.summary import StudyPublisher

_AT = {"baseline": (AT_BASELINE,), "own": (AT_OWN,), "both": (AT_BASELINE, AT_OWN)}


def unresolved(tests: list[Test], variant: str, baseline: str, at: str) -> bool:
    """Whether a Δ `at` names (`seeds.at`) is tested or testable but not resolved in the
    family's verdicts (`tests`, `study_family`'s)."""
    for where in _AT[at]:
        test = headline(tests, variant, baseline, where)
        if test is not None and test.decision.delta is not None and not test.decision.resolved:
            return True
    return False


def add_seeds(session: StudyOfVariants, publisher: StudyPublisher | None = None) -> list[str]:
    """Activate the next seed where a Δ is unresolved; one line per variant that got one.

    `publisher` (`study.summary.StudyPublisher`) gives the pairings checked this run;
    without one every pair is tested unpaired (Welch)."""
    seeds = session.spec.seeds
    if not isinstance(seeds, SequentialSeeds):
        return []
    design = design_of(seeds, session.spec.statistics)
    pairings = publisher.pairings if publisher is not None else {}
    method = session.spec.lr_search.interpolation
    stats = {
        v.key: variant_stats(observations(session.trials[v.key].points()), method, n_resamples=0)
        for v in session.variants
    }
    tests = study_family(session.variants, stats, pairings, design, session.spec.statistics.correction)
    targets: dict[str, int] = {}
    for v in session.variants:
        for name, base_key in v.baselines.items():
            if base_key not in stats or not unresolved(tests, v.key, name, seeds.at):
                continue
            # One more seed: the pair's shared seeds plus one. A baseline shared with
            # other variants may already be ahead (Llama at 5 seeds, this variant at 3):
            # then only the variant moves, up to its baseline's seeds and beyond together.
            n = min(session.trials[v.key].active_seeds(), session.trials[base_key].active_seeds()) + 1
            for key in (v.key, base_key):
                targets[key] = max(targets.get(key, 0), n)
    lines = []
    names = {v.key: v.name for v in session.variants}
    for key, n in targets.items():
        if session.trials[key].grow_active_seeds(n):
            lines.append(f"{names[key]}: a Δ is unresolved, now seeds 0..{n - 1} (max {seeds.max})")
    return lines
