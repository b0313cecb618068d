"""`cem-ablate study FILE FILE ... --dry-run`: the campaign's plan and cost; nothing is written.

One table row per file (its trials priced alone, as its own dry run counts them, and what it
adds to the campaign: the trials no earlier file asks for), then the campaign's totals: distinct
trials by role, GPU-hours each trial once (worst and expected case under sequential seeds,
`study.campaign`), each sequential design against fixed seeds, and what the storage already
holds settled under the current code (a rerun of a finished campaign trains nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cem_ablate.study.campaign import CampaignPlan, CampaignTrial
from cem_ablate.study.estimates import GpuRate

if TYPE_CHECKING:
    from rich.console import Console

    from cem_ablate.config.trial_record import TrialRecord


@dataclass(frozen=True)
class CampaignCost:
    """A plan's GPU-hours at one rate."""

    alone: float  # the files priced alone, summed (a shared trial counted in every file)
    worst: float  # each distinct trial once, every sequential seed trained
    expected: float  # each distinct trial once, weighted by the chance it trains
    by_role: dict[str, float]  # worst case per role
    sequential: bool  # some trial trains only if a comparison is unresolved (sequential seeds)


def campaign_cost(plan: CampaignPlan, rate: GpuRate) -> CampaignCost:
    hours = rate.gpu_hours
    trials = plan.trials.values()
    by_role: dict[str, float] = {}
    for t in trials:
        by_role[t.role] = by_role.get(t.role, 0.0) + hours(t.train_flops)
    alone = sum(hours(t.train_flops) for f in plan.files for t in plan.file_trials(f.name))
    return CampaignCost(
        alone,
        sum(by_role.values()),
        sum(t.trained * hours(t.train_flops) for t in trials),
        by_role,
        any(t.trained < 1.0 for t in trials),
    )


def gh(hours: float) -> str:
    """GPU-hours for a line: whole hours with thousands separators, 3 digits below 100."""
    return f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g}"


def _role_counts(trials: list[CampaignTrial]) -> str:
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.role] = counts.get(t.role, 0) + 1
    return " + ".join(f"{n:,} {role}" for role, n in counts.items())


def budget_line(cost: CampaignCost, rate: GpuRate, budget: float) -> str:
    """Whether the campaign (its expected case under sequential seeds) fits `budget` GPU-hours,
    by how much it misses, and the MFU at which the same FLOPs would fit."""
    need = cost.expected
    case = " expected" if cost.sequential else ""
    if need <= budget:
        return f"budget {gh(budget)} GPU-hours: the campaign fits ({gh(need)}{case}, {gh(budget - need)} to spare)"
    return (
        f"budget {gh(budget)} GPU-hours: the campaign misses it by {gh(need - budget)} GPU-hours "
        f"({gh(need)}{case}, {need / budget:.2f}x the budget); the same FLOPs fit at "
        f"{rate.mfu * need / budget * 100:.3g}% MFU of {rate.tflops:g} TFLOP/s"
    )


def print_campaign(
    plan: CampaignPlan,
    rate: GpuRate,
    console: Console,
    scale: str | None,
    settled: dict[str, bool] | None = None,
    budget: float | None = None,
) -> CampaignCost:
    """The table and totals of one campaign (module docstring); returns its cost."""
    from rich.table import Table

    cost = campaign_cost(plan, rate)
    title = f"campaign of {len(plan.files)} study files" + (f", scale {scale}" if scale else "")
    table = Table(title=f"{title} (dry run: nothing started)", title_justify="left")
    for col in ("file", "study", "variants", "trials", "GPU-h alone", "new trials", "GPU-h new"):
        table.add_column(col, justify="left" if col in ("file", "study") else "right")
    for f in plan.files:
        mine, owned = plan.file_trials(f.name), plan.owned(f.name)
        table.add_row(
            f.label,
            f.name,
            str(len(f.expanded.variants)),
            f"{len(mine):,}",
            f"{gh(sum(rate.gpu_hours(t.train_flops) for t in mine))}",
            f"{len(owned):,}",
            f"{gh(sum(rate.gpu_hours(t.train_flops) for t in owned))}",
        )
    console.print(table)
    lines = _total_lines(plan, cost, rate, settled) + ([budget_line(cost, rate, budget)] if budget else [])
    for line in lines:
        console.print(line, markup=False, highlight=False)
    return cost


def _total_lines(plan: CampaignPlan, cost: CampaignCost, rate: GpuRate, settled: dict[str, bool] | None) -> list[str]:
    variants = [v for f in plan.files for v in f.expanded.variants]
    models = {v.variant_key for v in variants} | {t.variant.variant_key for t in plan.trials.values()}
    asked = sum(len(plan.file_trials(f.name)) for f in plan.files)
    trials = list(plan.trials.values())
    lines = [
        f"distinct: {len(trials):,} trials ({_role_counts(trials)}) of {asked:,} the files ask for; "
        f"{len(variants)} variants, {len(models)} distinct models trained (variant keys, proxies included)"
    ]
    roles = ", ".join(f"{role} {gh(hours)}" for role, hours in cost.by_role.items())
    worst = " in the worst case (every sequential seed trained)" if cost.sequential else ""
    lines.append(
        f"GPU time at {rate.describe()}: the files priced alone {gh(cost.alone)} GPU-hours; the campaign "
        f"{gh(cost.worst)} GPU-hours{worst}, each distinct trial once ({roles})"
    )
    if cost.sequential:
        lines.append(
            f"expected case: {gh(cost.expected)} GPU-hours (each seed past min weighted by the chance a "
            "comparison of its variant is still unresolved; comparisons taken as independent, before Holm)"
        )
    lines += [design.text() for design in plan.designs]
    if settled is not None:
        lines.append(_settled_line(plan, settled, rate))
    return lines


def _settled_line(plan: CampaignPlan, settled: dict[str, bool], rate: GpuRate) -> str:
    trials = list(plan.trials.values())
    done = [t for t in trials if settled.get(t.identity)]
    left = [t for t in trials if not settled.get(t.identity)]
    hours = sum(t.trained * rate.gpu_hours(t.train_flops) for t in left)
    if not done:
        return "storage: none of these trials is settled in it yet (a run trains them all)"
    return (
        f"storage: {len(done):,} of the {len(trials):,} trials are settled in it under this code (finished or "
        f"diverged, any study): a run trains the other {len(left):,} ({gh(hours)} GPU-hours"
        f"{', expected' if any(t.trained < 1 for t in left) else ''})"
    )


def settled_trials(plan: CampaignPlan, storage_url: str) -> dict[str, bool] | None:
    """Identity -> whether the storage holds the trial settled (finished or diverged) under the
    current code, read only; None without a storage. A transfer target counts where one of the
    studies asking for it holds a settled trial of its variant and seed at the current trial key
    of the rate it trained at."""
    from cem_ablate.study.reuse import finished_trials
    from cem_ablate.study.storage import open_for_reading
    from cem_ablate.study.variants import optuna_study_name

    with open_for_reading(storage_url) as storage:
        if storage is None:
            return None
        finished = finished_trials(storage)
    by_study: dict[tuple[str, int | None], list[TrialRecord]] = {}  # a record's seed: None when the trial set none
    for record in finished.values():
        by_study.setdefault((record.study, record.seed), []).append(record)
    out: dict[str, bool] = {}
    for f in plan.files:
        for a in plan.asked[f.name]:
            if a.role not in ("target", "ladder"):
                out[a.identity] = out.get(a.identity, False) or a.identity in finished
                continue
            own = by_study.get((optuna_study_name(f.name, a.variant), a.seed), [])
            out[a.identity] = out.get(a.identity, False) or any(
                r.lr is not None and r.trial_key == a.variant.trial_key(r.lr, a.seed) for r in own
            )
    return out
