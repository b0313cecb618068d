"""A study's comparisons as one family: which tests a report makes, and their verdicts.

Per variant and baseline, up to three Δ = variant − baseline (the objective is
minimized: Δ < 0 is better), each the grid point nearest (log2 lr) an Akima lr*:
- "baseline lr*": both at the baseline's lr* grid point (the headline: "does the
  variant beat the tuned baseline as a drop-in?");
- "own lr*": both at the variant's own lr* grid point, where that is another one;
- "optima": each at its own lr* grid point (tuned vs tuned), where those differ from
  both of the above.
Tests on the same data are one test, not two. Each is `analysis.decision.decide`:
paired t over the shared seeds where the pair is paired (one learning rate, and
`study.pairing` found identical initializations and data order), else Welch over every
finished seed of each side -- or, with `statistics.variance: pooled`, the t-test with the
seed variance pooled over every point the family compares (`analysis.decision.pooled_t`).
The family is every test of the report: Holm-adjusted at
the study's `statistics: {alpha, correction}` (`analysis.decision.adjust`), on the
p-values already corrected for the seed design's looks (`Design`).

Pure functions of the variants' statistics: the coordinator (MLflow tags) and the
report call the same ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from cem_ablate.analysis.decision import Decision, Design, PooledVariance, adjust, decide, pool
from cem_ablate.analysis.statistics import VariantStats

if TYPE_CHECKING:
    from cem_ablate.study.pairing import Pairing
    from cem_ablate.study.spec import SequentialSeeds, StatisticsConfig
    from cem_ablate.study.variants import Variant

AT_BASELINE, AT_OWN, AT_OPTIMA = "baseline lr*", "own lr*", "optima"

Correction = Literal["holm", "none"]  # `statistics.correction` (study.spec.StatisticsConfig)


@dataclass(frozen=True)
class Test:
    """One comparison of the family, decided."""

    variant: str  # variant key
    baseline: str  # the baseline's name in the study file
    at: str  # AT_BASELINE, AT_OWN or AT_OPTIMA
    lr_variant: float
    lr_baseline: float
    paired: bool  # the test used (paired t or Welch)
    decision: Decision


def design_of(seeds: list[int] | SequentialSeeds, statistics: StatisticsConfig) -> Design:
    """The study's seed design: a list of seeds is one look; `{min, max, until, at}` a
    look after every seed (`at: both`: two tests per look); `statistics`
    (`study.spec.StatisticsConfig`) gives α and whether the seed variance is pooled."""
    from cem_ablate.study.spec import SequentialSeeds

    pooled = statistics.variance == "pooled"
    if isinstance(seeds, SequentialSeeds):
        assert seeds.max is not None  # validated: SequentialSeeds.validate_seeds requires max
        return Design.sequential(seeds.min, seeds.max, seeds.at, statistics.alpha, pooled)
    return Design.fixed(len(seeds), statistics.alpha, pooled)


def design_record(design: Design, correction: str) -> dict:
    """How the verdicts were decided, for stats.json (a report of the stored study reads it)."""
    return {
        "looks": list(design.looks),
        "tests_per_look": design.tests_per_look,
        "alpha": design.alpha,
        "correction": correction,
        "pooled": design.pooled,
    }


def design_from_record(record: Mapping) -> tuple[Design, Correction]:
    design = Design(
        tuple(record["looks"]),
        int(record["tests_per_look"]),
        float(record["alpha"]),
        bool(record.get("pooled", False)),
    )
    correction = str(record["correction"])
    if correction not in ("holm", "none"):  # `analysis.decision.adjust`'s own check, as the verdicts would raise it
        raise ValueError(f"correction must be 'holm' or 'none', got {correction!r}")
    return design, "holm" if correction == "holm" else "none"


def decide_at(
    variant: VariantStats,
    baseline: VariantStats,
    lr_variant: float,
    lr_baseline: float,
    paired: bool,
    design: Design,
    pooled: PooledVariance | None = None,
) -> Decision:
    """One Δ: the variant at `lr_variant` vs the baseline at `lr_baseline`; paired only
    at one learning rate of a paired pair; `pooled`: the family's pooled seed variance."""
    v, b = variant.at(lr_variant), baseline.at(lr_baseline)
    return decide(
        v.by_seed() if v else {},
        b.by_seed() if b else {},
        paired=paired and lr_variant == lr_baseline,
        design=design,
        pooled=pooled,
    )


def comparison_points(variant: VariantStats, baseline: VariantStats) -> list[tuple[str, float, float]]:
    """(at, variant lr, baseline lr) of each distinct test of one variant/baseline pair.

    A side with trials at one learning rate only (a transfer target: it trains at its
    proxy's lr* alone) is compared at that rate only: a test at another rate would have no
    seeds on that side by construction: a row without a test."""
    lr_b, lr_v = baseline.best_grid_lr, variant.best_grid_lr
    out: list[tuple[str, float, float]] = []
    for at, (lr_at_v, lr_at_b) in ((AT_BASELINE, (lr_b, lr_b)), (AT_OWN, (lr_v, lr_v)), (AT_OPTIMA, (lr_v, lr_b))):
        if lr_at_v is None or lr_at_b is None or (lr_at_v, lr_at_b) in [(a, b) for _, a, b in out]:
            continue
        if _only_elsewhere(variant, lr_at_v) or _only_elsewhere(baseline, lr_at_b):
            continue
        out.append((at, lr_at_v, lr_at_b))
    return out


def _only_elsewhere(stats: VariantStats, lr: float) -> bool:
    """True when `stats` has trials at exactly one learning rate, and it is not `lr`."""
    return len(stats.by_lr) == 1 and stats.by_lr[0].lr != lr


def decide_family(
    stats: Mapping[str, VariantStats],
    baselines: Mapping[str, Mapping[str, str]],
    paired: Mapping[tuple[str, str], bool],
    design: Design,
    correction: Correction,
) -> list[Test]:
    """Every test of the study (variants in `baselines`' order), Holm-adjusted together.

    `stats`: variant key -> its statistics; `baselines`: variant key -> {baseline name:
    baseline's variant key}; `paired`: (variant key, baseline name) -> whether the pair
    is paired (missing: not paired, Welch)."""
    points = [
        (key, name, base_key, paired.get((key, name), False), at, lr_v, lr_b)
        for key, named in baselines.items()
        if key in stats
        for name, base_key in named.items()
        if base_key in stats
        for at, lr_v, lr_b in comparison_points(stats[key], stats[base_key])
    ]
    pooled = _pooled(stats, points) if design.pooled else None
    tests = []
    for key, name, base_key, is_paired, at, lr_v, lr_b in points:
        decision = decide_at(stats[key], stats[base_key], lr_v, lr_b, is_paired, design, pooled)
        tests.append(Test(key, name, at, lr_v, lr_b, is_paired and lr_v == lr_b, decision))
    adjusted = adjust([t.decision for t in tests], alpha=design.alpha, correction=correction)
    return [
        Test(t.variant, t.baseline, t.at, t.lr_variant, t.lr_baseline, t.paired, d) for t, d in zip(tests, adjusted)
    ]


def pooled_points(variants: Sized) -> int:
    """How many points a pooled report's variance comes from, before it runs: one per variant
    (a transfer target trains at one rate; a grid pair whose optima differ adds one, so this is
    the fewest), at least the two sides of one comparison."""
    return max(2, len(variants))


def _pooled(stats: Mapping[str, VariantStats], points: list[tuple]) -> PooledVariance | None:
    """The seed variance pooled over every point the family compares: each (variant, learning
    rate) once, whichever tests share it (`analysis.decision.pool`)."""
    groups: dict[tuple[str, float], list[float]] = {}
    for key, _, base_key, _, _, lr_v, lr_b in points:
        for k, lr in ((key, lr_v), (base_key, lr_b)):
            point = stats[k].at(lr)
            if point is not None:
                groups.setdefault((k, lr), list(point.by_seed().values()))
    return pool(list(groups.values()))


def study_family(
    variants: Iterable[Variant],
    stats: Mapping[str, VariantStats],
    pairings: Mapping[tuple[str, str], Pairing],
    design: Design,
    correction: Correction,
) -> list[Test]:
    """`decide_family` over a study's variants (`.key`, `.baselines`) with the pairings
    checked for it (`(variant key, baseline name) -> study.pairing.Pairing`; missing:
    Welch): the family the coordinator publishes and the sequential seeds stop on."""
    return decide_family(
        stats,
        {v.key: v.baselines for v in variants},
        {pair: p.paired for pair, p in pairings.items()},
        design,
        correction,
    )


def headline(tests: list[Test], variant: str, baseline: str, at: str = AT_BASELINE) -> Test | None:
    """The test `at` of one pair; "own lr*" on the baseline's grid point is the headline
    test itself (one test, not two)."""
    mine = [t for t in tests if t.variant == variant and t.baseline == baseline]
    exact = next((t for t in mine if t.at == at), None)
    if exact is not None or at != AT_OWN:
        return exact
    return next((t for t in mine if t.at == AT_BASELINE), None)
