"""Sequential seeds (`seeds: {min, max, until: resolved}`, issues 11 and 18).

When every planned trial is final, each variant whose Δ against a baseline is still
unresolved gets one more seed, and so does that baseline, up to `max`; the
coordinator then runs the new slots and asks again. "Resolved" is the one decision
rule (`analysis.decision.decide` + `resolved`) under the study's seed design
(`study.verdicts.design_of`): every look is tested at α / K, K = looks × tests per
look (`at: both` tests two grid points), so stopping at whichever look keeps the
design's false-positive rate at or below α. The Δ(s) tested are `seeds.at`'s: at the
baseline's lr* grid point, the variant's own, or both, each the study's test for the
pair (paired t where `study.pairing` found the pair paired, else Welch). A Δ with no
test at all (the variant diverged at that learning rate) is not something more seeds
resolve: it is left alone.
"""

from __future__ import annotations

from cem_ablate.analysis.decision import resolved
from cem_ablate.analysis.statistics import observations, variant_stats
from cem_ablate.study.spec import SequentialSeeds
from cem_ablate.study.verdicts import decide_at, design_of

_AT = {"baseline": ("baseline",), "own": ("own",), "both": ("baseline", "own")}


def unresolved(variant, baseline, at: str, paired: bool, design) -> bool:
    """Whether a Δ `at` names (`seeds.at`) is testable but not yet resolved."""
    lrs = {"baseline": baseline.best_grid_lr, "own": variant.best_grid_lr}
    for where in _AT[at]:
        lr = lrs[where]
        if lr is None:
            continue
        decision = decide_at(variant, baseline, lr, lr, paired, design)
        if decision.delta is not None and not resolved(decision, design):
            return True
    return False


def add_seeds(session, publisher=None) -> list[str]:
    """Plan the next seed where a Δ is unresolved; one line per variant that got one.

    `publisher` (`study.summary.StudyPublisher`) gives the pairings checked this run;
    without one every pair is tested unpaired (Welch)."""
    seeds = session.spec.seeds
    if not isinstance(seeds, SequentialSeeds):
        return []
    design = design_of(seeds, session.spec.statistics.alpha)
    pairings = publisher.pairings if publisher is not None else {}
    method = session.spec.lr_search.interpolation
    stats = {v.key: variant_stats(observations(session.trials[v.key].points()), method, n_resamples=0)
             for v in session.variants}
    targets: dict[str, int] = {}
    for v in session.variants:
        for name, base_key in v.baselines.items():
            if base_key not in stats:
                continue
            pairing = pairings.get((v.key, name))
            paired = pairing is not None and pairing.paired
            if not unresolved(stats[v.key], stats[base_key], seeds.at, paired, design):
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
        if session.trials[key].plan_seeds(n):
            lines.append(f"{names[key]}: a Δ is unresolved, now seeds 0..{n - 1} (max {seeds.max})")
    return lines
