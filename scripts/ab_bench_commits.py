"""Training-step speed of two checkouts of cem-ablate, side by side ("the training
step's speed is unchanged under standard").

`cem-ablate bench` compares variants within one process; two versions of the code cannot
share a process, so this alternates whole bench runs of the two checkouts (old, new, new,
old, ... : the order flips every pair, so a slow drift of the machine cancels) and prints, per
variant, each run's median tokens/s and the new/old ratio of every adjacent pair, with their
median and range. Run it on a quiet machine.

    python scripts/ab_bench_commits.py --old /work/base58 --new /work/main --pairs 3 --out /tmp/ab -- \
        --variants llama cem_attn_t2 --memory-variants --sizes bench --modes eager --precisions fp32 \
        --warmup-steps 1 --repeats 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def bench(checkout: Path, args: list[str], out: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    subprocess.run(
        [sys.executable, "-m", "cem_ablate.cli.main", "bench", *args, "--json", str(out)],
        cwd=checkout,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    rows = json.loads(out.read_text())["rows"]
    return {r["variant"]: r["tokens_per_s_median"] for r in rows if not r["memory_only"] and not r["error"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("bench_args", nargs=argparse.REMAINDER)
    opts = parser.parse_args()
    args = [a for a in opts.bench_args if a != "--"]
    opts.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for pair in range(opts.pairs):
        order = ("old", "new") if pair % 2 == 0 else ("new", "old")
        for side in order:
            checkout = opts.old if side == "old" else opts.new
            result = bench(checkout.resolve(), args, opts.out / f"{side}_{pair}.json")
            runs[side].append(result)
            print(f"pair {pair + 1} {side}: " + ", ".join(f"{v} {t:.1f} tok/s" for v, t in result.items()), flush=True)
    print("\n| variant | old tok/s (runs) | new tok/s (runs) | new/old per pair | median [range] |")
    print("|---|---|---|---|---|")
    for variant in runs["old"][0]:
        old = [r[variant] for r in runs["old"]]
        new = [r[variant] for r in runs["new"]]
        ratios = [n / o for n, o in zip(new, old)]
        print(
            f"| {variant} | {', '.join(f'{x:.1f}' for x in old)} | {', '.join(f'{x:.1f}' for x in new)} | "
            f"{', '.join(f'{x:.3f}' for x in ratios)} | {statistics.median(ratios):.3f} "
            f"[{min(ratios):.3f}, {max(ratios):.3f}] |"
        )


if __name__ == "__main__":
    main()
