"""lr* across width from trial CSVs (GPU leases, scripts/gpu_mup_evidence.sh; CPU stores; reports).

Each device lease starts bare, so trials of one study can end up in several stores; their
CSVs (one row per trial) are pooled here and put through the report's own estimators
(analysis.statistics.variant_stats: the Akima fit on the seed mean, analysis.optimum's 95%
interval; once per variant), per width family of studies/mup_width.yaml. The transfer study's proxy trials
(studies/transfer.yaml, proxy d 64) are the width study's d 64 trials and count as such. Only
the largest complete block of seeds x rates enters a fit (a lease cut short leaves some seeds
partial: a partial grid would weigh the rates it reached more; a later scale that adds a rate
leaves it partial until every seed has it), and the table says how many seeds did.

    python scripts/mup_width_csv_report.py docs/figures/mup_width_gpu/trials_lease*.csv
    python scripts/mup_width_csv_report.py --seeds 0 docs/figures/mup_width_gpu_scaled/trials.csv
    python scripts/mup_width_csv_report.py --at 256 docs/figures/mup_width_gpu_scaled/trials*.csv
    python scripts/mup_width_csv_report.py --studies std_width_cpu docs/figures/cpu_70eff9c_trials.csv
    python scripts/mup_width_csv_report.py --studies mup_width_cpu --proxies none --at 256 \
        --transfer transfer_cpu_mlp_proxy5,transfer_cpu_first,transfer_cpu_attention_T2,transfer_cpu_full_cem \
        docs/figures/cpu_217a9b8_trials.csv docs/figures/cpu_70eff9c_trials.csv

A CSV per store (scripts/store_trials_csv.py) or per written report whose store is gone
(scripts/report_trials_csv.py: the CPU d 32-128 studies of 2026-11-26).

A study's trials reused by key in another study (a scale that adds rates or seeds to an earlier
one) enter once: a trial is its (variant, seed, lr).

`--plot DIR` draws, per family, test perplexity against the learning rate with one curve per
width (the report's figure: seed means ± std, Akima curve, lr* with its 95% interval) into
DIR/ppl_vs_lr_<family>.png, and lr* against width for every family into DIR/lr_star_vs_width.png.

`--at D` adds the acceptance's transfer check at width D: each family's full-grid optimum there
against the transfer study's targets (trained at the proxy's lr*), and the verdicts vs Llama
from each, decided by the report's own rule (study.verdicts.decide_family: Welch t, since
these architectures do not share initial values, Holm over each family's tests). Its last
column is the transferred rate's cost on the target's smooth curve (analysis.smooth_gap: a
quadratic in log lr with seed offsets, fitted to the full grid's and the targets' trials within
an octave of the grid's lr*, a residual-bootstrap 95% interval and the quadratic's lack-of-fit p):
one trial's scatter around that curve at d 256 exceeds the seed std at the best grid point, and
the best of several grid means is biased low, so the point-against-point gap mostly measures noise.
`--transfer transfer_gpu_scaled_proxy5` selects the 5-proxy-seed study's targets (comma-separated
names: several studies' targets, e.g. one per family; where two have a family, the first named). `--proxies
PREFIX` names the transfer studies whose proxy trials are pooled as d 64 trials (default
transfer_gpu: the GPU leases'; a CPU store holds other recipes' proxies, which must not mix in).

    python scripts/mup_width_csv_report.py --studies mup_width_pilot_zero_warmup30 --proxies transfer_cpu_zero \
        --at 256 --transfer transfer_cpu_zero_warmup30_llama docs/figures/cpu_70eff9c_trials.csv
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict

from cem_ablate.analysis.akima import curve_minima
from cem_ablate.analysis.decision import ALPHA, Design, decide
from cem_ablate.analysis.smooth_gap import smooth_gap
from cem_ablate.analysis.statistics import Observation, variant_stats
from cem_ablate.study.verdicts import decide_family

FAMILIES = ("llama", "cem_attention_T1", "cem_attention_T2", "cem_mlp_T1", "full_cem_T2")
WIDTHS = (32, 64, 128, 256)


def main(
    paths: list[str],
    seeds: set[int] | None = None,
    at: int | None = None,
    plot: str | None = None,
    transfer: str = "transfer_gpu_scaled",
    studies: str = "mup_width_gpu",
    proxies: str = "transfer_gpu",
) -> None:
    values, targets = read_trials(paths, seeds, transfer, studies, proxies)
    # each variant's fit and intervals, once (the report's own: analysis.statistics.variant_stats)
    stats = {variant: _stats(per_seed) for variant, per_seed in values.items() if per_seed}
    print("| family | d_model | seeds | lr* (Akima, seed mean) [95%] | per-seed argmin | test ppl at lr* |")
    print("|---|---|---|---|---|---|")
    for family in FAMILIES:
        stars = []
        for d in WIDTHS:
            variant = f"d{d}_{family}"
            if variant not in stats:
                continue
            per_seed, optimum = values[variant], stats[variant].optimum
            fit, iv = optimum.fit, optimum.lr_interval
            interval = (
                f"[{iv.low:.3g}, {iv.high:.3g}]"
                if iv
                else f"({optimum.interval_note})"
                if optimum.interval_note
                else ""
            )
            argmins = []
            for seed in sorted(per_seed):
                pts = sorted(per_seed[seed].items())
                x, _ = curve_minima([p[0] for p in pts], [p[1] for p in pts])
                argmins.append(f"{2.0 ** float(x):.3g}")
            edge = f" ({fit.edge} edge)" if fit.edge else ""
            stars.append((fit.lr_star, fit.edge))
            print(
                f"| {family} | {d} | {len(per_seed)} | {fit.lr_star:.3g}{edge} {interval} | "
                f"{', '.join(argmins)} | {fit.ppl_star:.3f} |"
            )
        if len(stars) >= 2:
            lo, hi = min(s for s, _ in stars), max(s for s, _ in stars)
            bound = " (a lower bound: an lr* at a grid edge)" if any(e for _, e in stars) else ""
            print(f"| {family} | drift max/min | | {hi / lo:.2f}x{bound} | | |")
    if at is not None:
        transfer_check(stats, targets, at, values)
    if plot is not None:
        plot_families(values, stats, plot)


def read_trials(
    paths: list[str],
    seeds: set[int] | None = None,
    transfer: str = "transfer_gpu_scaled",
    studies: str = "mup_width_gpu",
    proxies: str = "transfer_gpu",
):
    """The width grids and the transfer targets of the CSVs at `paths`.

    Returns (values, targets): values[variant][seed][lr] for every `d<width>_<family>` variant
    of the width studies (names starting with `studies`; the `proxies` transfer studies' proxy
    trials count as d 64), cut to its largest complete seeds x rates block and left out with
    fewer than 3 rates; targets[family][seed][lr] of the named `transfer` studies (a family's
    targets from the first named study that has any: a later study that retrains one family,
    e.g. with more proxy seeds, is named first to replace it)."""
    values: dict[str, dict[int, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    order = transfer.split(",")
    by_study: dict[str, dict] = {name: defaultdict(lambda: defaultdict(dict)) for name in order}
    for path in paths:
        for row in csv.DictReader(open(path)):
            if row["state"] != "COMPLETE":
                continue
            study = row["study"].split("/")[0]
            if study.startswith("transfer") and not study.endswith("_proxy"):
                if study in by_study:  # the named transfer studies' targets
                    by_study[study][row["variant"]][int(row["seed"])][float(row["lr"])] = float(row["value"])
                continue
            if row["study"].startswith(studies):
                variant = row["variant"]
            elif row["study"].startswith(proxies) and "_proxy/" in row["study"]:
                variant = f"d64_{row['variant'].removesuffix('@proxy')}"
            else:
                continue
            if seeds is None or int(row["seed"]) in seeds:
                values[variant][int(row["seed"])][float(row["lr"])] = float(row["value"])
    targets = {}
    for name in reversed(order):
        targets.update(by_study[name])
    for variant, per_seed in values.items():
        grid, kept = complete_rectangle(per_seed)
        values[variant] = {seed: {lr: v for lr, v in per_seed[seed].items() if lr in grid} for seed in kept}
    for variant in [v for v, per_seed in values.items() if len(set().union(*per_seed.values())) < 3]:
        print(f"({variant}: fewer than 3 rates, no fit)")
        del values[variant]
    return values, targets


def complete_rectangle(per_seed: dict[int, dict[float, float]]) -> tuple[set[float], list[int]]:
    """The rates and seeds of the largest complete seeds x rates block: one seed's rates, and
    every seed that has all of them. A seed cut short (a lease that ended) is left out rather
    than its rates weighing more; a rate only some seeds have (a later scale that added it for
    one seed so far) is left out rather than the seeds without it."""
    best: tuple[int, int, set[float], list[int]] = (0, 0, set(), [])
    for points in per_seed.values():
        grid = set(points)
        seeds = sorted(s for s, p in per_seed.items() if grid <= set(p))
        best = max(best, (len(grid) * len(seeds), len(seeds), grid, seeds), key=lambda b: b[:2])
    return best[2], best[3]


def plot_families(values, stats, out: str) -> None:
    """The per-family sweeps (study.plots' own figure) and lr* against width."""
    from pathlib import Path

    from cem_ablate.figures.plots import SweepSeries, _pyplot, plot_ppl_vs_lr, save

    Path(out).mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.8), dpi=120)
    for i, family in enumerate(FAMILIES):
        series, points = [], []
        for d in WIDTHS:
            variant = f"d{d}_{family}"
            if variant not in stats:
                continue
            opt = stats[variant].optimum
            series.append(
                SweepSeries(
                    f"d_model {d}",
                    False,
                    [(lr, v) for p in values[variant].values() for lr, v in p.items()],
                    fit=opt.fit,
                    stats=stats[variant],
                )
            )
            points.append((d, opt.lr_star, opt.lr_interval))
        if not series:
            continue
        plot_ppl_vs_lr(
            series, Path(out) / f"ppl_vs_lr_{family}.png", title=f"{family}: test perplexity vs lr, by width"
        )
        shift = 1.0 + 0.03 * (i - 2)  # side by side at each width
        xs = [d * shift for d, _, _ in points]
        ys = [lr for _, lr, _ in points]
        lows = [lr - iv.low if iv else 0.0 for _, lr, iv in points]
        highs = [iv.high - lr if iv else 0.0 for _, lr, iv in points]
        ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, label=family)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(WIDTHS), [str(d) for d in WIDTHS])
    ax.set_xlabel("d_model")
    ax.set_ylabel("lr* (Akima on the seed mean; 95% interval)")
    ax.set_title("lr* across width under mup")
    ax.legend(fontsize=8)
    save(fig, Path(out) / "lr_star_vs_width.png")


def _stats(per_seed: dict[int, dict[float, float]]):
    return variant_stats([Observation(lr, seed, v) for seed, points in per_seed.items() for lr, v in points.items()])


def _verdicts(stats: dict) -> dict[str, str]:
    """family -> "verdict (Δ [interval], Holm p)" of its tuned-vs-tuned test against Llama."""
    design = Design.fixed(len({s for st in stats.values() for row in st.by_lr for s in row.seeds}), ALPHA)
    tests = decide_family(stats, {f: {"llama": "llama"} for f in FAMILIES[1:]}, {}, design, "holm")
    out = {}
    for t in tests:
        d = t.decision
        if d.delta is None:  # a transfer target has trials at its own lr only
            continue
        if t.lr_variant != stats[t.variant].best_grid_lr or t.lr_baseline != stats["llama"].best_grid_lr:
            continue  # the "optima" test (tuned vs tuned), as the transfer study has
        out[t.variant] = f"{d.verdict} ({d.delta:+.3f} [{d.low:+.3f}, {d.high:+.3f}], Holm p {d.p_holm:.3g})"
    return out


def _smooth(values, family: str, width: int, target: dict, lr: float, centre: float) -> str:
    observations = [
        (a, seed, v)
        for per_seed in (values[f"d{width}_{family}"], target)
        for seed, points in per_seed.items()
        for a, v in points.items()
    ]
    try:
        g = smooth_gap(observations, lr, centre)
    except ValueError as err:
        return f"({err})"
    return (
        f"{100 * g.relative:+.2f}% [{100 * g.low:+.2f}, {100 * g.high:+.2f}] "
        f"({g.lr_star:.3g}; {len(g.rates)} rates; p {g.lack_of_fit_p:.2g})"
    )


def transfer_check(stats, targets, width: int, values) -> None:
    """At `width`: full-grid optimum vs the transfer targets, and both studies' verdicts; from
    `values` (the trials per variant) also the transferred rate's cost on a quadratic fitted to
    the target's curve within an octave of its lr* (analysis.smooth_gap: single trials scatter
    more than the seed std at the best grid point, and the best of several grid means is biased
    low)."""
    grid = {f: stats[f"d{width}_{f}"] for f in FAMILIES if f"d{width}_{f}" in stats}
    moved = {f: _stats(targets[f]) for f in FAMILIES if targets.get(f)}
    if "llama" not in grid or "llama" not in moved:
        print(f"\n(no full grid or no transfer targets for Llama at d {width})")
        return
    print(
        f"\nTransfer to d {width}: the target at the proxy's lr* against the d {width} full grid "
        "(Akima on the seed mean, 95% interval; std: seed-to-seed at the grid point nearest lr*)"
    )
    print(
        "\n| family | full grid: lr* | full grid: ppl* [95%] | std at lr* | transferred lr | "
        "target ppl (mean ± std) | gap to ppl* (a point; its tests: the next two columns) | target − best grid point (lr) [95%], Welch p | "
        "on the smooth curve: gap [95%] (quadratic lr*; rates; lack-of-fit p) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for f in FAMILIES:
        if f not in grid or f not in moved:
            continue
        opt, row = grid[f].optimum, grid[f].at(grid[f].best_grid_lr)
        ((lr, target),) = [(r.lr, r) for r in moved[f].by_lr]
        iv = opt.objective_interval
        ci = f"[{iv.low:.3f}, {iv.high:.3f}]" if iv else f"({opt.interval_note})"
        gap = target.mean - opt.objective_star
        d = decide(target.by_seed(), row.by_seed(), paired=False, design=Design.fixed(target.n, ALPHA))
        print(
            f"| {f} | {opt.lr_star:.3g} | {opt.objective_star:.3f} {ci} | {row.std:.3f} | {lr:.3g} | "
            f"{target.mean:.3f} ± {target.std:.3f} | {gap:+.3f} ({100 * gap / opt.objective_star:+.2f}%) | "
            f"{d.delta:+.3f} ({row.lr:.3g}) [{d.low:+.3f}, {d.high:+.3f}], p {d.p:.2g} | "
            f"{_smooth(values, f, width, targets[f], lr, opt.lr_star)} |"
        )
    full, transferred = _verdicts(grid), _verdicts(moved)
    print(f"\n| variant vs Llama at d {width} | full grid | transfer | same |")
    print("|---|---|---|---|")
    for f in FAMILIES[1:]:
        a, b = full.get(f, "-"), transferred.get(f, "-")
        if a == b == "-":  # a family neither study has
            continue
        same = "-" if "-" in (a, b) else "yes" if a.split()[0] == b.split()[0] else "NO"  # "-": one study lacks it
        print(f"| {f} | {a} | {b} | {same} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csvs", nargs="+", help="trials.csv files of scripts/gpu_mup_evidence.sh")
    parser.add_argument("--seeds", help="comma-separated seeds to use (default: every complete seed)")
    parser.add_argument("--at", type=int, help="width of the transfer targets: full grid vs transfer there")
    parser.add_argument(
        "--transfer",
        default="transfer_gpu_scaled",
        help="the transfer studies (comma-separated names; for a family in several, the "
        "first) whose targets --at compares "
        "(default transfer_gpu_scaled)",
    )
    parser.add_argument("--plot", metavar="DIR", help="write the per-family sweeps and lr* vs width here")
    parser.add_argument(
        "--studies",
        default="mup_width_gpu",
        help="the width studies whose trials are pooled: names starting with this "
        "(default mup_width_gpu; std_width_cpu for standard parametrization on CPU)",
    )
    parser.add_argument(
        "--proxies",
        default="transfer_gpu",
        help="the transfer studies whose proxy trials count as d 64 trials: names starting "
        "with this (default transfer_gpu; the width studies' recipe must be theirs; "
        "a prefix no study has, e.g. none, pools no proxies)",
    )
    opts = parser.parse_args()
    main(
        opts.csvs,
        {int(x) for x in opts.seeds.split(",")} if opts.seeds else None,
        opts.at,
        opts.plot,
        opts.transfer,
        opts.studies,
        opts.proxies,
    )
