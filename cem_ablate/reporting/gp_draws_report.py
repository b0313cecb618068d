"""The report's GP-draws section: Table 3 with the function draw as the unit (docs/design/experiments.md#s9-gaussian-process-study).

A study gets this section when its variants are GP regressions over at least two
`data.gp.data_seed` values (studies/table3_gp_draws.yaml). Variants are sorted by
their validated configs: kernel -> depth (model.mlp.steps) -> draw -> variant key.
Per kernel and depth (`analysis.gp_draws`): per draw the seed mean of the test RMSE at
that variant's own lr* grid point with its t interval over seeds; pooled over draws
with a t interval over the draws; Δ vs T = 1 as a paired t over the draws of the
per-draw seed means, the section's comparisons Holm-adjusted together at the study's
α (`decision.adjust`). Every lr* at a grid edge is listed (the grid is meant to make
every optimum interior). The floor: each draw's exact-GP posterior RMSE
(`study.gp_floor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from cem_ablate.analysis.decision import ALPHA, Decision, adjust
from cem_ablate.analysis.gp_draws import DepthDraws, DepthSummary, summarize_depth, versus_shallow
from cem_ablate.analysis.statistics import VariantStats


@dataclass(frozen=True)
class GPDrawsDesign:
    """kernel -> depth -> draw -> variant key."""

    kernels: dict[str, dict[int, dict[int, str]]]


def gp_draws_design(expanded) -> GPDrawsDesign | None:
    if expanded is None:
        return None
    gp = [v for v in expanded.variants if v.config.data.task == "gp"]
    if len({v.config.data.gp.data_seed for v in gp}) < 2:
        return None
    kernels: dict[str, dict[int, dict[int, str]]] = {}
    for v in gp:
        cfg = v.config
        kernels.setdefault(cfg.data.gp.kernel, {}).setdefault(cfg.model.mlp.steps, {})[cfg.data.gp.data_seed] = v.key
    return GPDrawsDesign({k: dict(sorted(d.items())) for k, d in kernels.items()})


@dataclass(frozen=True)
class DepthRow:
    kernel: str
    summary: DepthSummary
    lrs: dict[int, float]  # draw -> the grid lr its values are at
    edges: list[str]  # "draw 1: low" for optima at a grid edge
    decision: Decision | None  # vs T = 1 of the kernel (None for T = 1)


def analyze(
    design: GPDrawsDesign,
    stats: Mapping[str, VariantStats],
    alpha: float = ALPHA,
    correction: Literal["holm", "none"] = "holm",
) -> list[DepthRow]:
    """Pure: `stats` variant key -> its statistics."""
    rows, decisions = [], []
    for kernel, depths in design.kernels.items():
        draws_of = {}
        for depth, draws in depths.items():
            by_draw, lrs, edges = {}, {}, []
            for draw, key in sorted(draws.items()):
                s = stats.get(key)
                if s is None or s.best_grid_lr is None:
                    continue
                lrs[draw] = s.best_grid_lr
                row = s.at(s.best_grid_lr)
                assert row is not None  # best_grid_lr is one of the variant's grid rates
                by_draw[draw] = row.by_seed()
                if s.optimum is not None and s.optimum.edge:
                    edges.append(f"draw {draw}: {s.optimum.edge}")
            draws_of[depth] = (DepthDraws(depth, by_draw), lrs, edges)
        shallow = draws_of.get(1)
        for depth, (dd, lrs, edges) in draws_of.items():
            decision = versus_shallow(dd, shallow[0], alpha) if shallow is not None and depth != 1 else None
            rows.append(DepthRow(kernel, summarize_depth(dd, alpha), lrs, edges, decision))
            if decision is not None:
                decisions.append(len(rows) - 1)
    adjusted = adjust([d for r in rows if (d := r.decision) is not None], alpha=alpha, correction=correction)
    for i, d in zip(decisions, adjusted):
        r = rows[i]
        rows[i] = DepthRow(r.kernel, r.summary, r.lrs, r.edges, d)
    return rows


def _iv(m) -> str:
    if m.n == 0:
        return "-"
    return f"{m.mean:.4f} [{m.low:.4f}, {m.high:.4f}] (n={m.n})" if m.low is not None else f"{m.mean:.4f} (n={m.n})"


def section_lines(
    rows: list[DepthRow], floors: Mapping[tuple[str, int], float], metric: str, alpha: float = ALPHA
) -> list[str]:
    lines = [
        "## GP draws: the function draw as the unit",
        "",
        f"Per draw: seed mean of the {metric} at that variant's lr* grid point, 95% t interval over seeds; "
        "pooled: mean of the per-draw means, 95% t interval over draws; Δ vs T = 1: paired t over the draws "
        f"of the per-draw seed means, the section's comparisons Holm-adjusted at α = {alpha:g}.",
        "",
        "| kernel | T | per draw [95%] | pooled over draws [95%] | Δ vs T=1 over draws [95%] | p | Holm p | "
        "verdict | lr per draw | lr* at an edge |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_draw = "; ".join(f"{d}: {_iv(m)}" for d, m in r.summary.per_draw.items())
        d = r.decision
        if d is None:
            delta = p = ph = verdict = "-"
        else:
            delta = (
                f"{d.delta:+.4f} [{d.low:+.4f}, {d.high:+.4f}]"
                if d.low is not None
                else f"{d.delta:+.4f} (n too small)"
                if d.delta is not None
                else "-"
            )
            p = f"{d.p:.3g}" if d.p is not None else "-"
            ph = f"{d.p_holm:.3g}" if d.p_holm is not None else "-"
            verdict = d.verdict
        lrs = ", ".join(f"{k}: {v:.3g}" for k, v in r.lrs.items())
        lines.append(
            f"| {r.kernel} | {r.summary.depth} | {per_draw} | {_iv(r.summary.pooled)} | {delta} | {p} | "
            f"{ph} | {verdict} | {lrs} | {', '.join(r.edges) or 'none'} |"
        )
    if floors:
        lines += [
            "",
            "Exact-GP floor (posterior mean with the true kernel and noise) per draw: "
            + "; ".join(f"{k} draw {d}: {v:.4f}" for (k, d), v in sorted(floors.items())),
        ]
    return lines


def gp_draws_section(records, expanded, metric: str, console=None, published=None) -> list[str]:
    """Markdown lines for report.md ([] unless the study has several GP draws)."""
    design = gp_draws_design(expanded)
    if design is None:
        return []
    from cem_ablate.study.gp_floor import exact_gp_rmse
    from cem_ablate.study.publication import publications

    published = publications(records) if published is None else published  # parsed once (study.publication)
    stats = {r.key: published[r.key].statistics.stats for r in records if published.get(r.key) is not None}
    rows = analyze(design, stats, expanded.spec.statistics.alpha, expanded.spec.statistics.correction)
    floors = {}
    for kernel, depths in design.kernels.items():
        for draw, key in next(iter(depths.values())).items():  # one variant per draw: the data are the same
            floors[(kernel, draw)] = exact_gp_rmse(expanded.variant(key).config.data.gp)
    lines = section_lines(rows, floors, metric, expanded.spec.statistics.alpha)
    if console is not None:
        for line in lines:
            console.print(line, markup=False, highlight=False)
    return lines
