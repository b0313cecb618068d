"""lr* across width from the trial CSVs of GPU leases (scripts/gpu_mup_evidence.sh).

Each device lease starts bare, so trials of one study can end up in several stores; their
CSVs (one row per trial) are pooled here and put through the report's own estimators
(analysis.akima.fit_akima on the seed mean, analysis.optimum.optimum_bounds for the 95%
interval), per width family of studies/mup_width.yaml. The transfer study's proxy trials
(studies/transfer.yaml, proxy d 64) are the width study's d 64 trials and count as such. Only
seeds whose grid is complete enter a fit (a lease cut short leaves some seeds partial: a partial
grid would weigh the rates it reached more), and the table says how many did.

    python scripts/mup_width_csv_report.py docs/figures/mup_width_gpu/trials_lease*.csv
    python scripts/mup_width_csv_report.py --seeds 0 docs/figures/mup_width_gpu_scaled/trials.csv
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict

from cem_ablate.analysis.akima import curve_minima, fit_akima
from cem_ablate.analysis.optimum import optimum_bounds

FAMILIES = ("llama", "cem_attention_T1", "cem_attention_T2", "cem_mlp_T1", "full_cem_T2")
WIDTHS = (32, 64, 128, 256)


def main(paths: list[str], seeds: set[int] | None = None) -> None:
    values: dict[str, dict[int, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        for row in csv.DictReader(open(path)):
            if row["state"] != "COMPLETE":
                continue
            if row["study"].startswith("mup_width_gpu"):
                variant = row["variant"]
            elif row["study"].startswith("transfer_gpu") and "_proxy/" in row["study"]:
                variant = f"d64_{row['variant'].removesuffix('@proxy')}"
            else:
                continue
            if seeds is None or int(row["seed"]) in seeds:
                values[variant][int(row["seed"])][float(row["lr"])] = float(row["value"])
    for variant, per_seed in values.items():
        grid = set().union(*per_seed.values())
        for seed in [s for s, points in per_seed.items() if set(points) != grid]:
            del per_seed[seed]
    print("| family | d_model | seeds | lr* (Akima, seed mean) [95%] | per-seed argmin | test ppl at lr* |")
    print("|---|---|---|---|---|---|")
    for family in FAMILIES:
        stars = []
        for d in WIDTHS:
            per_seed = values.get(f"d{d}_{family}")
            if not per_seed:
                continue
            fit = fit_akima([(lr, v) for seed in per_seed.values() for lr, v in seed.items()])
            bounds = optimum_bounds(per_seed, fit.lrs, fit.ppls, fit.lr_star, fit.ppl_star)
            interval = (f"[{bounds.lr[0]:.3g}, {bounds.lr[1]:.3g}]" if bounds.lr
                        else f"({bounds.reason})" if bounds.reason else "")
            argmins = []
            for seed in sorted(per_seed):
                pts = sorted(per_seed[seed].items())
                x, _ = curve_minima([p[0] for p in pts], [p[1] for p in pts])
                argmins.append(f"{2.0 ** float(x):.3g}")
            edge = f" ({fit.edge} edge)" if fit.edge else ""
            stars.append((fit.lr_star, fit.edge))
            print(f"| {family} | {d} | {len(per_seed)} | {fit.lr_star:.3g}{edge} {interval} | "
                  f"{', '.join(argmins)} | {fit.ppl_star:.3f} |")
        if len(stars) >= 2:
            lo, hi = min(s for s, _ in stars), max(s for s, _ in stars)
            bound = " (a lower bound: an lr* at a grid edge)" if any(e for _, e in stars) else ""
            print(f"| {family} | drift max/min | | {hi / lo:.2f}x{bound} | | |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csvs", nargs="+", help="trials.csv files of scripts/gpu_mup_evidence.sh")
    parser.add_argument("--seeds", help="comma-separated seeds to use (default: every complete seed)")
    opts = parser.parse_args()
    main(opts.csvs, {int(x) for x in opts.seeds.split(",")} if opts.seeds else None)
