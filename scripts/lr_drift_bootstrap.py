"""How firm is an lr* drift across width? A seed bootstrap of max/min lr* over the widths.

The transfer acceptance reads "lr* drifts at most 1.5x over the widths" off one number per
family: max/min over the widths of the Akima lr* of each width's seed-mean curve
(scripts/mup_width_csv_report.py, the report's own estimator). Each width's lr* carries its
own interval (analysis.optimum), but the drift, a ratio of the extremes, has none. This script
gives it one by resampling seeds: at every width independently, the seeds are drawn with
replacement (as many as the width has), the seed-mean curve of the draw is refitted by Akima
(analysis.akima.curve_minima, the same dense grid), and the drift is max/min of the widths'
refitted lr*. With n seeds a width has n^n equally likely ordered draws; where that is at most
`EXACT_LIMIT` they are all enumerated, and the widths' draws are then combined exhaustively
(or by `--draws` Monte Carlo combinations where the product is larger), so the result is
deterministic.

Read it as the drift's sensitivity to which seeds were run, not as a calibrated interval: a
percentile bootstrap over 3 seeds under-covers (for lr* itself the platform replaced it for that
reason: analysis.optimum's docstring), and 3 seeds give each width only 10 distinct resamples. It prints, per family, the drift as measured, the bootstrap
median and 2.5-97.5% percentiles, and the share of draws whose drift exceeds `--bound`.

    python scripts/lr_drift_bootstrap.py --studies mup_width_cpu --proxies none \\
        docs/figures/cpu_217a9b8_trials.csv docs/figures/cpu_70eff9c_trials.csv
    python scripts/lr_drift_bootstrap.py docs/figures/mup_width_gpu_scaled/trials.csv \\
        docs/figures/mup_width_gpu_scaled/trials_lease2.csv
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
from mup_width_csv_report import FAMILIES, WIDTHS, read_trials

from cem_ablate.analysis.akima import curve_minima

EXACT_LIMIT = 5000  # ordered resamples per width enumerated exactly (3 seeds: 27, 5 seeds: 3125)


def width_draws(per_seed: dict[int, dict[float, float]], rng: np.random.Generator, n_random: int = 4000) -> np.ndarray:
    """log2 lr* of the seed-mean Akima curve for each resample of one width's seeds (an array;
    each entry equally likely)."""
    seeds = sorted(per_seed)
    lrs = sorted(per_seed[seeds[0]])
    table = np.array([[per_seed[s][lr] for lr in lrs] for s in seeds])  # seeds x rates
    n = len(seeds)
    if n**n <= EXACT_LIMIT:
        picks = np.array(list(itertools.product(range(n), repeat=n)))
    else:
        picks = rng.integers(0, n, size=(n_random, n))
    means = table[picks].mean(axis=1)  # draws x rates
    x, _ = curve_minima(lrs, means)
    return np.asarray(x, dtype=np.float64)


def drift_distribution(
    per_width: list[np.ndarray], rng: np.random.Generator, max_exact: int = 2_000_000, n_random: int = 400_000
) -> np.ndarray:
    """max/min lr* over the widths for every combination of the widths' draws (exhaustive up to
    `max_exact` combinations, else `n_random` random ones)."""
    total = int(np.prod([len(d) for d in per_width]))
    if total <= max_exact:
        grids = np.meshgrid(*per_width, indexing="ij")
        stacked = np.stack([g.ravel() for g in grids])
    else:
        stacked = np.stack([d[rng.integers(0, len(d), size=n_random)] for d in per_width])
    return 2.0 ** (stacked.max(axis=0) - stacked.min(axis=0))


def main(
    paths: list[str], studies: str, proxies: str, bound: float, widths: tuple[int, ...], seed: int = 0
) -> list[dict]:
    values, _ = read_trials(paths, None, "", studies, proxies)
    rng = np.random.default_rng(seed)
    rows = []
    print(
        f"lr* drift (max/min over d {', '.join(map(str, widths))}) with a seed bootstrap; share of draws above {bound}x"
    )
    print()
    print(f"| family | seeds per width | drift as measured | bootstrap median [2.5%, 97.5%] | draws > {bound}x |")
    print("|---|---|---|---|---|")
    for family in FAMILIES:
        present = [d for d in widths if f"d{d}_{family}" in values]
        if len(present) < 2:
            continue
        point, draws = [], []
        for d in present:
            per_seed = values[f"d{d}_{family}"]
            lrs = sorted(next(iter(per_seed.values())))
            mean = np.mean([[per_seed[s][lr] for lr in lrs] for s in per_seed], axis=0)
            x, _ = curve_minima(lrs, mean[None, :])
            point.append(float(x[0]))
            draws.append(width_draws(per_seed, rng))
        measured = 2.0 ** (max(point) - min(point))
        n_seeds = "/".join(str(len(values[f"d{d}_{family}"])) for d in present)
        if min(len(values[f"d{d}_{family}"]) for d in present) < 2:  # one seed: nothing to resample
            rows.append({"family": family, "measured": measured})
            print(f"| {family} | {n_seeds} | {measured:.2f}x | (one seed at a width: no bootstrap) | |")
            continue
        dist = drift_distribution(draws, rng)
        lo, med, hi = np.percentile(dist, [2.5, 50, 97.5])
        share = float(np.mean(dist > bound))
        rows.append(
            {"family": family, "measured": measured, "median": med, "low": lo, "high": hi, "share_above": share}
        )
        print(f"| {family} | {n_seeds} | {measured:.2f}x | {med:.2f}x [{lo:.2f}x, {hi:.2f}x] | {share:.0%} |")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="trial CSVs (scripts/store_trials_csv.py's columns)")
    parser.add_argument("--studies", default="mup_width_gpu", help="width studies' name prefix")
    parser.add_argument(
        "--proxies",
        default="transfer_gpu",
        help="transfer studies whose proxy trials count as d 64 ('none': no pooling)",
    )
    parser.add_argument("--bound", type=float, default=1.5, help="the acceptance's drift bound")
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)), help="comma-separated d_model")
    args = parser.parse_args()
    main(args.paths, args.studies, args.proxies, args.bound, tuple(int(w) for w in args.widths.split(",")))
