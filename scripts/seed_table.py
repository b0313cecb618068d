"""Mean ± std over seeds of each variant's final metric, read back from MLflow.

`cem-ablate report` prints lr* and ppl* per variant (Akima over learning rates, seeds
averaged first) and one row per trial; it has no spread over seeds. This script adds
it, for Table 3 (GP regression, ≥ 3 seeds) and the two-seed CPU tables of
docs/results.md. It reads the study exactly as `cem-ablate report STUDY_FILE` does
(same variant selection by config hash, same `cem_ablate.tracking.readback`).

    python scripts/seed_table.py studies/table3_gp.yaml --out docs/figures/table3_gp \
        --x model.mlp.steps --group data.gp.kernel --metric "test RMSE"

writes `<out>/seeds.md` (printed too): one row per variant and learning rate, then,
with several learning rates, one row per variant at its best one (lowest mean); with
`--x`, also `<out>/seeds.png`: the metric's mean ± std against the axis `--x`, one
line per value of the axis `--group` and learning rate. Metric: the trial's
objective (test perplexity for text, test RMSE for GP).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SeedRow:
    variant: str
    labels: dict[str, str]
    params: int | None
    flops_per_token: float | None  # forward
    lr: float
    values: list[float]  # one per finished seed
    baseline: str | None
    baseline_mean: float | None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float | None:
        """Sample standard deviation (n - 1); None for a single seed."""
        return statistics.stdev(self.values) if len(self.values) > 1 else None


def seed_rows(records) -> list[SeedRow]:
    by_key = {r.key: r for r in records}

    def finished(record) -> dict[float, list[float]]:
        out: dict[float, list[float]] = {}
        for t in record.trials:
            if t.status == "finished" and t.lr is not None and t.ppl is not None:
                out.setdefault(t.lr, []).append(t.ppl)
        return out

    rows = []
    for r in records:
        baseline = next((by_key[k] for k in r.baselines.values() if k in by_key), None)
        base_values = finished(baseline) if baseline is not None else {}
        for lr, values in sorted(finished(r).items()):
            base = base_values.get(lr)
            rows.append(SeedRow(r.name, r.labels, r.params_total, r.metrics.get("flops_per_token"), lr, values,
                                baseline.name if baseline else None, statistics.fmean(base) if base else None))
    return rows


def _flops(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def best_rows(rows: list[SeedRow]) -> list[SeedRow]:
    """Each variant at the learning rate with the lowest mean (the study's order)."""
    best: dict[str, SeedRow] = {}
    for row in rows:
        if row.variant not in best or row.mean < best[row.variant].mean:
            best[row.variant] = row
    return list(best.values())


def markdown(rows: list[SeedRow], metric: str) -> str:
    lines = [f"| variant | parameters | forward FLOPs/token | lr | seeds | {metric} mean ± std | "
             f"Δ vs baseline (same lr) | per seed |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        spread = f" ± {row.std:.4f}" if row.std is not None else ""
        delta = (f"{row.mean - row.baseline_mean:+.4f} vs {row.baseline}"
                 if row.baseline_mean is not None else "-")
        lines.append(f"| {row.variant} | {row.params:,} | {_flops(row.flops_per_token)} | {row.lr:.3g} | "
                     f"{len(row.values)} | {row.mean:.4f}{spread} | {delta} | "
                     f"{', '.join(f'{v:.4f}' for v in row.values)} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[SeedRow], x_key: str, group_key: str | None, metric: str, title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, float], list[SeedRow]] = {}
    for row in rows:
        if x_key in row.labels:
            groups.setdefault((row.labels.get(group_key, "") if group_key else "", row.lr), []).append(row)
    several_lrs = len({lr for _, lr in groups}) > 1
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for (name, lr), members in sorted(groups.items()):
        members.sort(key=lambda r: float(r.labels[x_key]))
        xs = [float(r.labels[x_key]) for r in members]
        label = ", ".join(part for part in (name, f"lr {lr:g}" if several_lrs else "") if part)
        ax.errorbar(xs, [r.mean for r in members], yerr=[r.std or 0.0 for r in members], marker="o",
                    capsize=4, label=label or None)
    ax.set_xscale("log", base=2)
    xticks = sorted({float(r.labels[x_key]) for r in rows if x_key in r.labels})
    ax.set_xticks(xticks, [f"{v:g}" for v in xticks])
    ax.set_xlabel(x_key)
    ax.set_ylabel(f"{metric} (mean ± std over seeds)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if any(name for name, _ in groups) or several_lrs:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="study file (YAML)")
    parser.add_argument("--scale", help="the scale the study was run with")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="the --set overrides the study was run with")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default sqlite:///<cwd>/mlruns/mlflow.db)")
    parser.add_argument("--out", required=True, help="folder for seeds.md (and seeds.png)")
    parser.add_argument("--metric", default="test perplexity", help="name of the final metric, for headers")
    parser.add_argument("--x", help="axis key for the plot's x axis (e.g. model.mlp.steps)")
    parser.add_argument("--group", help="axis key: one line per value (e.g. data.gp.kernel)")
    args = parser.parse_args(argv)

    from cem_ablate.cli.study_command import load_expanded
    from cem_ablate.config import ConfigError
    from cem_ablate.tracking.readback import read_study
    from cem_ablate.tracking.store import default_tracking_uri

    try:
        expanded = load_expanded(args.study, args.scale, args.set)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    keys = [v.key for v in expanded.variants]
    records = read_study(args.tracking_uri or default_tracking_uri(), expanded.spec.name, keys)
    order = {key: i for i, key in enumerate(keys)}
    records.sort(key=lambda r: order.get(r.key, len(order)))
    rows = seed_rows(records)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, args.metric)
    if len({row.lr for row in rows}) > 1:
        text += "\nAt each variant's best learning rate:\n\n" + markdown(best_rows(rows), args.metric)
    (out / "seeds.md").write_text(f"# Study `{expanded.spec.name}`: {args.metric} over seeds\n\n" + text)
    print(text, end="")
    if args.x:
        print(f"plot: {plot(rows, args.x, args.group, args.metric, expanded.spec.name, out / 'seeds.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
