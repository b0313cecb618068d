"""Sequential seeds (`seeds: {min, max, until: resolved}`, issue 11).

When every planned trial is final, each variant whose paired Δ against a baseline is
still unresolved (`analysis.statistics.compare`; at the baseline's lr* grid point, the
variant's own, or either: `seeds.at`) gets one more seed, and so does that baseline,
up to `max`. The coordinator then runs the new slots and asks again. A Δ with no
paired seed at all (the variant diverged at that learning rate) is not something more
seeds resolve: it is left alone.
"""

from __future__ import annotations

from cem_ablate.analysis.statistics import UNRESOLVED, compare, observations, variant_stats
from cem_ablate.study.spec import SequentialSeeds


def _unresolved(comparison, at: str) -> bool:
    """Whether the Δ(s) `at` names are unresolved; a Δ with no paired seed (the variant
    diverged there) is not something more seeds resolve."""
    deltas = {"baseline": [comparison.at_baseline_optimum], "own": [comparison.at_own_optimum],
              "both": [comparison.at_baseline_optimum, comparison.at_own_optimum]}[at]
    return any(d is not None and d.delta is not None and d.verdict == UNRESOLVED for d in deltas)


def add_seeds(session) -> list[str]:
    """Plan the next seed where a Δ is unresolved; one line per variant that got one."""
    seeds = session.spec.seeds
    if not isinstance(seeds, SequentialSeeds):
        return []
    method = session.spec.lr_search.interpolation
    stats = {v.key: variant_stats(observations(session.trials[v.key].points()), method, n_resamples=0)
             for v in session.variants}
    targets: dict[str, int] = {}
    for v in session.variants:
        for base_key in v.baselines.values():
            if base_key not in stats:
                continue
            if not _unresolved(compare(stats[v.key], stats[base_key]), seeds.at):
                continue
            # One more paired seed: the pair's shared seeds plus one. A baseline shared with
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
