"""`cem-ablate power --seeds 5` or `--seeds 2..5`: what a seed design can detect.

Prints the design, its false-positive rate (simulated through the decision rule the
reports use, `analysis.decision`), the smallest Δ it detects with 80% power (in units
of the seed-to-seed std; in the objective's units with --std) and, with --delta and
--std, its power at that Δ (`analysis.power`); `--pooled K` for a report that pools the
seed variance over K points. At paper scale a seed is tens of
GPU-hours: this is where to decide how many to buy.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re

AT = ("baseline", "own", "both")


def configure(parser: argparse.ArgumentParser) -> None:
    # Strings, validated in `run`: a bad value is one `error:` line (ConfigError), not usage text.
    parser.add_argument(
        "--seeds", required=True, metavar="N|MIN..MAX", help="fixed seeds (5) or sequential seeds until resolved (2..5)"
    )
    parser.add_argument(
        "--at",
        default="baseline",
        metavar="|".join(AT),
        help="sequential seeds: the Δ that decides (both: two grid points per look)",
    )
    parser.add_argument("--alpha", default="0.05", help="the design's false-positive rate (default 0.05)")
    parser.add_argument(
        "--welch", action="store_true", help="unpaired (Welch) test: variants whose initial values are not shared"
    )
    parser.add_argument(
        "--pooled",
        metavar="K",
        help="unpaired, with one seed variance pooled over K points (statistics.variance: pooled; "
        "K: the models the report compares, at least 2)",
    )
    parser.add_argument("--delta", help="a difference in the objective's units (with --std)")
    parser.add_argument("--std", help="seed-to-seed std in the objective's units (paired: of the differences)")


def _number(text: str, key: str, positive: bool = True) -> float:
    from cem_ablate.config import ConfigError

    try:
        value = float(text)
    except ValueError:
        raise ConfigError(key, f"must be a number, got {text!r}.") from None
    if not math.isfinite(value) or (positive and value <= 0):
        raise ConfigError(key, f"must be a positive number, got {text!r}.")
    return value


def parse_design(seeds: str, at: str, alpha: str):
    """`--seeds 5` -> Design.fixed(5); `--seeds 2..5` -> Design.sequential(2, 5, at)."""
    from cem_ablate.analysis.decision import Design
    from cem_ablate.config import ConfigError
    from cem_ablate.config.errors import unknown

    a = _number(alpha, "--alpha")
    if not a < 1:
        raise ConfigError("--alpha", f"must be between 0 and 1, got {alpha!r}.")
    if at not in AT:
        raise unknown("--at", at, AT, what="value")
    fixed = re.fullmatch(r"\s*(\d+)\s*", seeds)
    span = re.fullmatch(r"\s*(\d+)\s*\.\.\s*(\d+)\s*", seeds)
    if fixed:
        n = int(fixed.group(1))
        if n < 2:
            raise ConfigError("--seeds", f"must be at least 2 (a t-test needs 2 seeds), got {n}.")
        if at != "baseline":
            raise ConfigError("--at", "applies to sequential seeds (--seeds MIN..MAX) only.")
        return Design.fixed(n, a)
    if span:
        low, high = int(span.group(1)), int(span.group(2))
        if low < 1 or high < 2 or high < low:
            raise ConfigError("--seeds", f"MIN..MAX needs 1 <= MIN <= MAX and MAX >= 2, got {seeds!r}.")
        return Design.sequential(low, high, at, a)
    raise ConfigError("--seeds", f"must be a number of seeds (5) or MIN..MAX (2..5), got {seeds!r}.")


def run(args: argparse.Namespace) -> int:
    from cem_ablate.analysis.power import false_positive_rate, min_detectable_effect, power
    from cem_ablate.config import ConfigError

    design = parse_design(args.seeds, args.at, args.alpha)
    groups = 2
    if args.pooled is not None:
        groups = int(_number(args.pooled, "--pooled"))
        if groups < 2 or str(groups) != args.pooled.strip():
            raise ConfigError("--pooled", f"must be a whole number of points, at least 2, got {args.pooled!r}.")
        design = dataclasses.replace(design, pooled=True)
    paired = not args.welch and args.pooled is None
    std = _number(args.std, "--std") if args.std is not None else None
    delta = _number(args.delta, "--delta", positive=False) if args.delta is not None else None
    if delta is not None and std is None:
        raise ConfigError("--delta", "needs --std (the seed-to-seed std in the same units).")
    unit = "std of the per-seed differences" if paired else "seed-to-seed std of each side"
    test = "paired t" if paired else f"pooled t over {groups} points" if design.pooled else "Welch t"
    print(f"design: {design.describe()}; {test}")
    print(
        f"false-positive rate: {false_positive_rate(design, paired=paired, groups=groups):.3f} "
        f"(simulated; α = {design.alpha:g})"
    )
    mde = min_detectable_effect(design, 0.8, paired, groups=groups)
    if mde is None:
        print("smallest Δ detected with 80% power: none (the design cannot resolve any Δ)")
    else:
        in_units = f" = {mde * std:.4g} in the objective's units" if std is not None else ""
        print(f"smallest Δ detected with 80% power: {mde:.3f} × {unit}{in_units}")
    if delta is not None:
        assert std is not None  # --delta needs --std (checked above)
        d = abs(delta) / std
        print(f"power at Δ = {delta:g} (std {std:g}, Δ/std = {d:.3f}): {power(design, d, paired, groups=groups):.3f}")
    return 0
