"""A variant's answer as the short columns of its parent run (`tracking.comparison_columns`).

Per baseline the headline test of the study's family (`study.verdicts.headline`: both at
the baseline's lr* grid point, Holm over the whole study), and the variant's Akima lr*
and objective*. The publisher (`study.summary`) logs them beside the full-precision
metrics; the runs table of `cem-ablate ui` opens on them.
"""

from __future__ import annotations

from cem_ablate.analysis.decision import UNRESOLVED
from cem_ablate.analysis.statistics import OBJECTIVE_SHORT, VariantStats
from cem_ablate.study.variants import Variant
from cem_ablate.study.verdicts import Test, headline
from cem_ablate.tracking.comparison_columns import BaselineAnswer, display_record


def answers(tests: list[Test], variant: Variant) -> list[BaselineAnswer]:
    out = []
    for name in variant.baselines:
        test = headline(tests, variant.key, name)
        d = test.decision if test is not None else None
        out.append(
            BaselineAnswer(name, d.delta, d.low, d.high, d.p, d.p_holm, d.verdict)
            if d is not None
            else BaselineAnswer(name, None, None, None, None, None, UNRESOLVED)
        )
    return out


def display_columns(
    tests: list[Test], variant: Variant, stats: VariantStats, correction: str
) -> tuple[dict[str, float | None], dict[str, str]]:
    """The parent run's display metrics and tags."""
    optimum = stats.optimum
    return display_record(
        answers(tests, variant),
        correction,
        OBJECTIVE_SHORT[variant.config.data.task],
        optimum.lr_star if optimum else None,
        optimum.objective_star if optimum else None,
    )
