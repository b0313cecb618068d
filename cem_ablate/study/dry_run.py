"""`cem-ablate study FILE --dry-run`: the plan, its cost and its power; nothing is written anywhere.

Power before compute (`analysis.power`): for the study's seed design (`study.verdicts.design_of`,
the rule the study's verdicts use) the false-positive rate, simulated through the
decision rule (`analysis.power`), and the smallest Δ detected with 80% power, in
units of the seed-to-seed std (and in the objective's units where the storage holds
finished trials of the study's grid points under the current code, `seed_spread`),
for a paired comparison and an unpaired (Welch) one: which applies to a pair is
checked when the study runs (`study.pairing`), not here (it builds both models).

Time: GPU-hours at a peak and an MFU; CPU time at a FLOP rate for the trials left to
train (finished ones in the storage subtracted) and, where the storage holds finished
trials of the same variants, at the wall time those took (`measured_seconds`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cem_ablate.analysis.optimum import MIN_LRS_FOR_LR_STAR
from cem_ablate.analysis.statistics import OBJECTIVE_NAMES
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.study.estimates import CPU_TRAIN_FLOPS_PER_S, VariantEstimate, estimate
from cem_ablate.study.spec import SequentialSeeds, initial_seeds
from cem_ablate.study.trials import trial_slots
from cem_ablate.study.variants import ExpandedStudy, Variant

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class PlanRow:
    variant: Variant
    estimate: VariantEstimate
    trials: int  # the worst case: with sequential seeds, every variant at `max` seeds
    min_trials: int  # sequential seeds: every Δ resolved with `min` seeds (else = trials)


def plan(expanded: ExpandedStudy) -> list[PlanRow]:
    spec = expanded.spec
    n_trials = len(trial_slots(spec.lr_search, list(spec.seeds)))
    n_min = len(trial_slots(spec.lr_search, initial_seeds(spec.seeds)))
    return [
        PlanRow(v, estimate(v.run_config(spec.lr_search.lr_range[0], spec.seeds[0])), n_trials, n_min)
        for v in expanded.variants
    ]


def _si(
    value: float,
    units: tuple[tuple[str, float], ...] = (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)),
) -> str:
    for unit, scale in units:
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def _duration(hours: float) -> str:
    if hours >= 1:
        return f"{hours:.3g} h"
    if hours * 60 >= 1:
        return f"{hours * 60:.3g} min"
    return f"{hours * 3600:.2g} s"


def seeds_text(seeds: list[int] | SequentialSeeds) -> str:
    if isinstance(seeds, SequentialSeeds):
        assert seeds.max is not None  # validated: required with until: resolved
        where = {"baseline": "at the baseline's lr*", "own": "at the variant's own lr*", "both": "at either lr*"}[
            seeds.at
        ]
        return (
            f"seeds 0..{seeds.min - 1}, one more to a variant and its baseline while their Δ {where} is "
            f"unresolved, up to 0..{seeds.max - 1}"
        )
    return f"seeds {list(seeds)}"


def lr_plan_text(expanded: ExpandedStudy) -> str:
    search = expanded.spec.lr_search
    seeds = seeds_text(expanded.spec.seeds)
    if search.method == "grid":
        lrs = ", ".join(f"{lr:g}" for lr in search.grid)
        if len(search.grid) < MIN_LRS_FOR_LR_STAR:  # the report marks the verdicts the same way
            return (
                f"learning rates (grid): {lrs}: no lr* is estimated (fewer than {MIN_LRS_FOR_LR_STAR}); "
                f"the verdicts compare at a fixed learning rate; {seeds}"
            )
        return f"learning rates (grid, {search.interpolation} fit): {lrs}; {seeds}"
    return (
        f"learning rates ({search.method}, {search.n_trials} draws per seed, log-uniform "
        f"[{search.low:g}, {search.high:g}], {search.interpolation} fit); {seeds}"
    )


@dataclass(frozen=True)
class SeedSpread:
    """Seed-to-seed stds in the objective's units, from finished trials of this study's
    grid points under the current code (their trial keys), pooled over variants and
    learning rates (variances weighted by n - 1)."""

    side: float | None  # of one variant's values at one learning rate
    differences: float | None  # of the per-seed differences variant - baseline at one learning rate
    trials: int  # the finished trials they come from


def _pooled(groups: list[list[float]]) -> float | None:
    import numpy as np

    groups = [g for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in groups)
    if not dof:
        return None
    return float(np.sqrt(sum(np.var(np.asarray(g, dtype=np.float64), ddof=1) * (len(g) - 1) for g in groups) / dof))


def seed_spread(expanded: ExpandedStudy, grid: dict) -> SeedSpread | None:
    """What the storage says about the seed-to-seed spread, from its finished trials of
    the study's grid points (`study.reuse.dry_run_reads`); None without any."""
    import math

    spec = expanded.spec
    if not grid:
        return None
    values: dict[tuple[str, float], dict[int, float]] = {}
    for (key, lr, seed), t in grid.items():
        if t.status == TrialStatus.FINISHED and t.value is not None and math.isfinite(t.value):
            values.setdefault((key, lr), {})[seed] = float(t.value)
    diffs = []
    for v in expanded.variants:
        for base_key in v.baselines.values():
            for lr in spec.lr_search.grid:
                mine, theirs = values.get((v.key, lr), {}), values.get((base_key, lr), {})
                diffs.append([mine[s] - theirs[s] for s in sorted(set(mine) & set(theirs))])
    return SeedSpread(
        _pooled([list(d.values()) for d in values.values()]), _pooled(diffs), sum(len(d) for d in values.values())
    )


def measured_seconds(grid: dict) -> dict[str, list[float]]:
    """Variant key -> wall-clock seconds of its finished grid trials in the storage
    (`study.reuse.dry_run_reads`: current code, any study), as each trial recorded them
    (study/trial_run.py)."""
    import math

    out: dict[str, list[float]] = {}
    for (key, _, _), t in grid.items():
        seconds = t.attrs.get("seconds") if t.status == TrialStatus.FINISHED else None
        if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0:
            out.setdefault(key, []).append(float(seconds))
    return out


def trials_left(rows: list[PlanRow], finished: dict[str, int]) -> dict[str, int]:
    """Variant key -> planned trials a run still trains: its trials less those `finished`."""
    return {r.variant.key: max(0, r.trials - finished.get(r.variant.key, 0)) for r in rows}


def measured_line(
    rows: list[PlanRow], seconds: dict[str, list[float]], finished: dict[str, int], workers: int = 1
) -> str | None:
    """The trials left, timed by what this storage's finished trials of the same variants
    took (a variant's trials differ only in lr and seed, so in cost only when one diverges,
    and diverged trials are left out); None when no variant has a finished trial."""
    measured = [r for r in rows if seconds.get(r.variant.key)]
    if not measured:
        return None
    n = sum(len(seconds[r.variant.key]) for r in measured)
    left = trials_left(rows, finished)
    hours = (
        sum(left[r.variant.key] * sum(seconds[r.variant.key]) / len(seconds[r.variant.key]) for r in measured) / 3600
    )
    uncovered = sum(left[r.variant.key] for r in rows if not seconds.get(r.variant.key))
    rest = f"; {uncovered} trials of variants with none finished not included" if uncovered else ""
    return (
        f"measured: {n} finished trials of {len(measured)} of the {len(rows)} variants are in the storage; at their "
        f"variants' mean wall time per trial the {sum(left[r.variant.key] for r in measured)} trials left of those "
        f"variants take {_duration(hours)} of trial time, about {_duration(hours / workers)} wall clock with "
        f"{workers} worker{'s' if workers > 1 else ''} (if they run as the measured trials did){rest}"
    )


def power_lines(expanded: ExpandedStudy, spread: SeedSpread | None = None) -> list[str]:
    """The seed design's false-positive rate and 80%-power effect, paired and Welch (in
    the objective's units too where `spread` has a std)."""
    from cem_ablate.analysis.power import false_positive_rate, min_detectable_effect
    from cem_ablate.study.verdicts import design_of, pooled_points

    spec = expanded.spec
    design = design_of(spec.seeds, spec.statistics)
    family = {"holm": "Holm over the report's comparisons", "none": "no correction over the report"}
    lines = [f"seed design: {design.describe()}; {family[spec.statistics.correction]}"]
    metric = OBJECTIVE_NAMES[expanded.variants[0].config.data.task] if expanded.variants else "objective"
    groups = pooled_points(expanded.variants) if design.pooled else 2
    unpaired = f"pooled t over {groups} points" if design.pooled else "Welch t"
    for paired, test, unit in (
        (True, "paired t", "std of the per-seed differences"),
        (False, unpaired, "seed-to-seed std of each side"),
    ):
        mde = min_detectable_effect(design, 0.8, paired, groups=groups)
        detects = (
            f"detects Δ ≥ {mde:.2f} × the {unit} with 80% power"
            if mde is not None
            else "cannot resolve any Δ (fewer than 2 seeds)"
        )
        std = None if spread is None else (spread.differences if paired else spread.side)
        if mde is not None and std is not None and spread is not None:  # std comes from spread
            detects += f" (≈ {mde * std:.3g} {metric} at the std {std:.3g} of {spread.trials} finished trials)"
        lines.append(
            f"  {test} ({'pairs checked paired' if paired else 'otherwise'}): false-positive rate "
            f"{false_positive_rate(design, paired=paired, groups=groups):.3f} (simulated, α = {design.alpha:g}); "
            f"{detects}"
        )
    return lines


def profile_lines(expanded: ExpandedStudy) -> list[str]:
    """The device profile the trials get on this machine, and on a bf16 GPU when this machine
    has none (training.device_profile), one line per distinct profile."""
    import torch

    from cem_ablate.training.device_profile import resolve_device_profile

    trains = [v.config.train for v in expanded.variants]
    lines = [f"device profile here: {c}" for c in sorted({resolve_device_profile(t).choices() for t in trains})]
    if not torch.cuda.is_available():
        lines += [
            f"device profile on a bf16 GPU: {c}"
            for c in sorted({resolve_device_profile(t, "cuda", device_has_bf16=True).choices() for t in trains})
        ]
    return lines


def print_plan(
    expanded: ExpandedStudy,
    rows: list[PlanRow],
    gpu_tflops: float,
    mfu: float,
    console: Console,
    spread: SeedSpread | None = None,
    finished: dict[str, int] | None = None,
    cpu_gflops: float | None = None,
    seconds: dict[str, list[float]] | None = None,
    workers: int = 1,
) -> None:
    """The plan table, totals, CPU time and power. `finished`: variant key -> planned trials
    the storage already holds finished (this study's own, and other studies' when reused),
    which a run does not train: the CPU time is for the rest, at `cpu_gflops` (the user's
    machine) or the quickstart-measured rate, and from `seconds` (`measured_seconds`) where
    the storage timed the same variants."""
    from rich.table import Table

    by_key = {r.variant.key: r for r in rows}
    table = Table(
        title=f"study {expanded.spec.name}: {len(rows)} variants (dry run: nothing started)", title_justify="left"
    )
    for col in (
        "variant",
        "baseline",
        "parameters",
        "vs baseline",
        "tokens/trial",
        "steps",
        "train FLOPs/trial",
        "GPU time/trial",
        "trials",
    ):
        table.add_column(col, justify="left" if col in ("variant", "baseline") else "right")
    for row in rows:
        est = row.estimate
        bases = [by_key[k] for k in row.variant.baselines.values() if k in by_key]
        base = bases[0] if bases else None  # the parameter ratio is against the first
        ratio = f"{est.params_total / base.estimate.params_total:.2f}x" if base else "-"
        table.add_row(
            row.variant.name + (" (baseline)" if row.variant.role == "baseline" else ""),
            ", ".join(b.variant.name for b in bases) or "-",
            f"{est.params_total:,}",
            ratio,
            _si(est.tokens),
            f"{est.steps:,}",
            _si(est.train_flops) + "FLOP",
            _duration(est.gpu_hours(gpu_tflops, mfu)),
            str(row.trials) if row.min_trials == row.trials else f"{row.min_trials}-{row.trials}",
        )
    console.print(table)
    console.print(lr_plan_text(expanded))
    for line in profile_lines(expanded):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    total_trials = sum(r.trials for r in rows)
    total_flops = sum(r.trials * r.estimate.train_flops for r in rows)
    total_hours = sum(r.trials * r.estimate.gpu_hours(gpu_tflops, mfu) for r in rows)
    worst = ""
    if any(r.min_trials != r.trials for r in rows):
        worst = f" in the worst case (every Δ unresolved; {sum(r.min_trials for r in rows)} if all resolve at once)"
    console.print(
        f"total: {total_trials} trials{worst}, {_si(total_flops)}FLOP of training, "
        f"{_duration(total_hours)} of GPU time ({total_hours:.3g} GPU-hours) at {gpu_tflops:g} TFLOP/s and {mfu:.0%} MFU"
    )
    finished = finished or {}
    left = trials_left(rows, finished)
    rate = CPU_TRAIN_FLOPS_PER_S if cpu_gflops is None else cpu_gflops * 1e9
    cpu_hours = sum(left[r.variant.key] * r.estimate.cpu_hours(rate) for r in rows)
    skipped = total_trials - sum(left.values())
    which = (
        f"the {sum(left.values())} trials left to train ({skipped} already finished in the storage)"
        if skipped
        else f"all {total_trials} trials"
    )
    source = (
        "--cpu-gflops"
        if cpu_gflops is not None
        else (
            "measured on the quickstart, startup and evaluation included; conservative for wider models: the width "
            "study's 162 trials, d 32-192, took 83 min where this said 3.71 h, studies/width.yaml; --cpu-gflops sets it"
        )
    )
    machine = "this machine" if cpu_gflops is not None else "2 cores"
    console.print(
        f"CPU: {_duration(cpu_hours)} wall clock on {machine} ({cpu_hours:.3g} CPU-hours on {machine}) for "
        f"{which} at {rate / 1e9:.3g} GFLOP/s ({source})",
        markup=False,
        highlight=False,
    )
    if measured := measured_line(rows, seconds or {}, finished, workers):
        console.print(measured, markup=False, highlight=False)
    if any(v.baselines for v in expanded.variants):
        for line in power_lines(expanded, spread):
            console.print(line, markup=False, highlight=False)


def transfer_costs(expanded: ExpandedStudy, gpu_tflops: float, mfu: float, cpu_rate: float) -> list[dict[str, Any]]:
    """lr_search method transfer: per variant, the GPU-hours and CPU-hours of its share of the
    proxy study (its proxy on the grid with the proxy seeds, a proxy shared by several variants
    counted once, at the first), of its target trials (one lr, the study's seeds) and of the
    full grid it replaces (every grid lr, the study's seeds)."""
    from cem_ablate.study.transfer import proxy_seeds

    spec = expanded.spec
    lr, seed = spec.lr_search.lr_range[0], list(spec.seeds)[0]
    proxies = {p.key: estimate(p.run_config(lr, seed)) for p in expanded.proxies}
    n_grid, n_proxy_seeds, n_seeds = len(spec.lr_search.grid), len(proxy_seeds(expanded)), len(list(spec.seeds))
    out, counted = [], set()
    for v in expanded.variants:
        target = estimate(v.run_config(lr, seed))
        assert v.proxy is not None  # every variant of a transfer study has its proxy (variants._proxies)
        proxy = proxies[v.proxy]
        proxy_trials = 0 if v.proxy in counted else n_grid * n_proxy_seeds
        counted.add(v.proxy)
        row = {
            "variant": v,
            "proxy": next(p for p in expanded.proxies if p.key == v.proxy),
            "proxy_trials": proxy_trials,
            "target_trials": n_seeds,
            "grid_trials": n_grid * n_seeds,
        }
        for name, unit, each in (
            ("proxy", proxy, proxy_trials),
            ("target", target, n_seeds),
            ("grid", target, n_grid * n_seeds),
        ):
            row[f"{name}_gpu_hours"] = each * unit.gpu_hours(gpu_tflops, mfu)
            row[f"{name}_cpu_hours"] = each * unit.cpu_hours(cpu_rate)
        out.append(row)
    return out


def print_transfer_plan(
    expanded: ExpandedStudy, gpu_tflops: float, mfu: float, console: Console, cpu_gflops: float | None = None
) -> None:
    """The transfer study's dry run: proxy and target cost beside the full grid's."""
    from rich.table import Table

    from cem_ablate.study.transfer import proxy_seeds

    spec = expanded.spec
    rate = CPU_TRAIN_FLOPS_PER_S if cpu_gflops is None else cpu_gflops * 1e9
    rows = transfer_costs(expanded, gpu_tflops, mfu, rate)
    table = Table(
        title=f"study {spec.name}: lr transfer, {len(rows)} variants (dry run: nothing started)", title_justify="left"
    )
    for col in (
        "variant",
        "proxy",
        "proxy trials",
        "proxy GPU-h",
        "target trials",
        "target GPU-h",
        "full grid trials",
        "full grid GPU-h",
    ):
        table.add_column(col, justify="left" if col in ("variant", "proxy") else "right")
    for r in rows:
        table.add_row(
            r["variant"].name + (" (baseline)" if r["variant"].role == "baseline" else ""),
            r["proxy"].name,
            str(r["proxy_trials"]),
            f"{r['proxy_gpu_hours']:.3g}",
            str(r["target_trials"]),
            f"{r['target_gpu_hours']:.3g}",
            str(r["grid_trials"]),
            f"{r['grid_gpu_hours']:.3g}",
        )
    console.print(table)
    grid = ", ".join(f"{lr:g}" for lr in spec.lr_search.grid)
    assert spec.lr_search.proxy is not None  # validated: method transfer requires lr_search.proxy
    console.print(
        f"proxies: {', '.join(f'{k}: {v}' for k, v in spec.lr_search.proxy.items())}; "
        f"learning rates (grid, {spec.lr_search.interpolation} fit): {grid}; "
        f"{seeds_text(proxy_seeds(expanded))}",
        markup=False,
        highlight=False,
    )
    console.print(f"targets: each at its proxy's lr*; {seeds_text(spec.seeds)}", markup=False, highlight=False)
    off_base = sorted(
        {
            (d.d_model, d.base_d_model)
            for d in (p.config.model.dims for p in expanded.proxies)
            if d.parametrization == "mup" and d.d_model != d.base_d_model
        }
    )
    if off_base:  # advice, not an error: muP transfers from any base, the evidence is for this one
        console.print(
            "note: proxies at "
            + ", ".join(f"d_model {d} with base_d_model {b}" for d, b in off_base)
            + ": the transfer evidence (docs/results/coordinate-check.md) sets base_d_model to the "
            "proxy's width, where mup is the standard model; a proxy below its base runs hotter "
            "attention and a larger per-entry lr than the base's",
            markup=False,
            highlight=False,
        )
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k.endswith(("_hours", "_trials"))}
    transfer_gpu = total["proxy_gpu_hours"] + total["target_gpu_hours"]
    transfer_cpu = total["proxy_cpu_hours"] + total["target_cpu_hours"]
    console.print(
        f"total: transfer {total['proxy_trials']} proxy + {total['target_trials']} target trials = "
        f"{transfer_gpu:.3g} GPU-hours ({total['proxy_gpu_hours']:.3g} proxy, {total['target_gpu_hours']:.3g} target); "
        f"full grid {total['grid_trials']} trials = {total['grid_gpu_hours']:.3g} GPU-hours "
        f"({total['grid_gpu_hours'] / transfer_gpu:.2f}x transfer), at {gpu_tflops:g} TFLOP/s and {mfu:.0%} MFU",
        markup=False,
        highlight=False,
    )
    console.print(
        f"CPU: transfer {_duration(transfer_cpu)}, full grid {_duration(total['grid_cpu_hours'])} on 2 cores "
        f"at {rate / 1e9:.3g} GFLOP/s",
        markup=False,
        highlight=False,
    )
