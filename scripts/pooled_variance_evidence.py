"""Evidence for `statistics.variance: pooled` (docs/results/pooled-variance.md).

    python scripts/pooled_variance_evidence.py        # from the repository root, about a minute

1. Is the seed-to-seed variance one number across models? Every distinct model of the CPU trial
   tables (docs/figures/cpu_*_trials.csv: variants, widths d 32-256, several recipes) with 3 seeds at
   its best learning rate, each model once by its identity (`model_identity`), never by its values: Bartlett's and Levene's tests (scipy.stats), and the spread of the log
   sample variances beyond what sampling alone gives (tau^2: the variance of log sigma^2 across
   models, by moments, with a one-sided 90% upper bound by inverting the simulated distribution).
2. What the campaign's design does there: 2 seeds pooled over k points at alpha 0.034 against 3 fixed
   Welch seeds at alpha 0.05, false-positive rate and power simulated through the decision rule's own
   t statistics, with every point's variance equal (tau = 0) and spread at the upper bound.
3. The proxies' seeds: lr* (Akima over the seed means) from 2 of 3 seeds against all 3, and what the
   2-seed lr* costs on the 3-seed curve, in seed stds.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special, stats

from cem_ablate.analysis.akima import fit_akima
from cem_ablate.analysis.decision import pooled_t, rejects, welch_t

ROOT = Path(__file__).resolve().parents[1]
CSVS = "docs/figures/cpu_*_trials.csv"  # under the repository root
DELTA = 3.52  # the Δ (seed stds) 3 fixed Welch seeds detect with 80% power (the campaign's dry run)
POOLED_ALPHA, REFERENCE_ALPHA = 0.034, 0.05
REPS = 20_000


BASE_D_MODEL = 64  # every CPU recipe's base_d_model (studies/mup_width.yaml, studies/transfer.yaml)
TRANSFER_TARGET_D_MODEL = 256  # the CPU transfer studies' target width; their proxies are the base width


def finished_trials(root: Path = ROOT) -> pd.DataFrame:
    frames = [pd.read_csv(path) for path in sorted(root.glob(CSVS))]
    d = pd.concat(frames)
    d = d[d.state == "COMPLETE"].copy()
    d["study"] = d.study.str.split("/").str[0]
    return d


def recipe(study: str) -> str:
    """The training recipe a study's name says its models share (studies/mup_width.yaml's scales)."""
    if "_250_" in study:
        return "250 steps"
    if "zero_warmup30" in study:
        return "600 steps, zero readout, 30% warmup"
    if "readout_x10" in study:
        return "600 steps, readout init x10"
    return "600 steps"


def model_identity(study: str, variant: str) -> tuple[str, str, str, int]:
    """(recipe, parametrization, family, d_model): what a trial trains, apart from its rate and
    seed. The trial key is that identity within one code version, but the tables span several
    (the oldest stores no key at all), so one model retrained under a new key, or stored by two
    studies, would count twice. At the base width muP is the standard model (SPEC), so there the
    parametrization is one."""
    name = variant.removesuffix("@proxy")
    width = re.match(r"d(\d+)_", name)
    if width:
        d_model, family = int(width.group(1)), name[width.end() :]
    else:  # a transfer study's proxy (base width) or target
        d_model, family = (BASE_D_MODEL if variant.endswith("@proxy") else TRANSFER_TARGET_D_MODEL), name
    parametrization = "standard" if study.startswith("std_") else "mup"
    if d_model == BASE_D_MODEL:
        parametrization = "mup = standard (base width)"
    return recipe(study), parametrization, family, d_model


@dataclass(frozen=True)
class Model:
    """One distinct model at its best learning rate: its 3 seed values and where they are stored."""

    identity: tuple[str, str, str, int]
    lr: float
    values: np.ndarray
    studies: tuple[str, ...]  # every study/variant that stores these trials


def models_at_best_lr(d: pd.DataFrame) -> list[Model]:
    """Each distinct model (`model_identity`) once, with its 3 seed values at its best mean
    learning rate. Two studies storing one model (a reused trial, or the same model retrained
    under another key) give one entry: the first stored copy's values."""
    found: dict[tuple, Model] = {}
    for (study, variant), g in d.groupby(["study", "variant"]):
        identity = model_identity(study, variant)
        by_lr = {lr: h.drop_duplicates("seed").sort_values("seed").iloc[:3] for lr, h in g.groupby("lr")}
        full = {lr: h for lr, h in by_lr.items() if len(h) == 3}
        if not full:
            continue
        lr, h = min(full.items(), key=lambda item: item[1].value.mean())
        key = (identity, lr, tuple(h.seed))
        where = f"{study}/{variant}"
        if key in found:
            m = found[key]
            found[key] = Model(m.identity, m.lr, m.values, m.studies + (where,))
        else:
            found[key] = Model(identity, float(lr), h.value.to_numpy(), (where,))
    return list(found.values())


def tau_squared(groups: list[np.ndarray]) -> tuple[float, float]:
    """(moments estimate, one-sided 90% upper bound) of the variance of log sigma^2 across models."""
    log_var = np.log([np.var(g, ddof=1) for g in groups])
    noise = special.polygamma(1, 1.0)  # var of log(chi^2_2 / 2): 2 df per model
    observed = float(np.var(log_var, ddof=1))
    rng = np.random.default_rng(0)
    m = len(groups)

    def chance_at_most_observed(tau2: float) -> float:
        log_sigma2 = rng.normal(0.0, np.sqrt(tau2), (4000, m))
        log_s2 = log_sigma2 + np.log(rng.chisquare(2, (4000, m)) / 2.0)
        return float((np.var(log_s2, axis=1, ddof=1) <= observed).mean())

    grid = np.linspace(0.0, 3.0, 61)
    upper = max(t for t in grid if chance_at_most_observed(t) >= 0.10)
    return observed - noise, float(upper)


def simulate(k: int, tau2: float, delta: float, rng) -> tuple[float, float]:
    """(rejection rate of 2 seeds pooled over k points at POOLED_ALPHA, of 3 Welch seeds at
    REFERENCE_ALPHA), every point's variance exp(N(0, tau2)), Δ in the pair's rms std."""
    sigma = np.exp(rng.normal(0.0, np.sqrt(tau2), (REPS, k)) / 2.0)
    rms = np.sqrt((sigma[:, 0] ** 2 + sigma[:, 1] ** 2) / 2.0)
    seeds = rng.standard_normal((REPS, k, 3)) * sigma[..., None]
    seeds[:, 0] += delta * rms[:, None]
    two = seeds[..., :2]
    pooled_var = two.var(axis=-1, ddof=1).mean(axis=-1)
    pooled = pooled_t(two[:, 0].mean(-1) - two[:, 1].mean(-1), 2, 2, pooled_var, float(k))
    welch = welch_t(seeds[:, 0], seeds[:, 1])

    def rate(result, alpha: float) -> float:
        """Share of verdicts: any under no difference, the right one (worse) under Δ > 0."""
        hit = rejects(result.p, alpha)
        return float((hit & (result.delta > 0) if delta else hit).mean())

    return rate(pooled, POOLED_ALPHA), rate(welch, REFERENCE_ALPHA)


def proxy_seed_rows(d: pd.DataFrame) -> pd.DataFrame:
    rows, seen = [], set()
    groups = sorted(d.groupby(["study", "variant"]), key=lambda item: -item[1].lr.nunique())  # the fullest copy
    for (study, variant), g in groups:
        identity = model_identity(study, variant)
        if identity in seen:
            continue
        seen.add(identity)
        table = g.pivot_table(index="lr", columns="seed", values="value", aggfunc="first")
        seeds = [s for s in table.columns if table[s].notna().all()][:3]
        if table.shape[0] < 4 or len(seeds) < 3:
            continue
        lrs = list(table.index)
        sd = float(np.sqrt(table[seeds].var(axis=1, ddof=1).mean()))
        full = fit_akima(list(zip(lrs, table[seeds].mean(axis=1))))
        for pair in itertools.combinations(seeds, 2):
            two = fit_akima(list(zip(lrs, table[list(pair)].mean(axis=1))))
            cost = np.interp(np.log2(two.lr_star), np.log2(full.curve_lrs), full.curve_ppls) - full.ppl_star
            rows.append(
                {
                    "model": f"{study}/{variant}",
                    "ratio": 2 ** abs(np.log2(two.lr_star / full.lr_star)),
                    "cost": cost / sd,
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    d = finished_trials()
    groups = [m.values for m in models_at_best_lr(d)]
    stds = [np.std(g, ddof=1) for g in groups]
    print(f"## 1. One seed variance? {len(groups)} distinct models, 3 seeds each\n")
    print(f"seed std: median {np.median(stds):.3g}, range {min(stds):.3g} to {max(stds):.3g} (perplexity)")
    for name, test in (("Bartlett", stats.bartlett), ("Levene (median)", stats.levene)):
        raw, logged = test(*groups), test(*[np.log(g) for g in groups])
        print(f"{name}: p = {raw.pvalue:.3f} on perplexity, {logged.pvalue:.3f} on its log")
    tau2, upper = tau_squared(groups)
    print(
        f"tau^2 (variance of log sigma^2 across models beyond sampling): {tau2:.3f} by moments, "
        f"90% upper bound {upper:.2f} (a model's std spread x{np.exp(np.sqrt(upper) / 2):.2f} at 1 sd)\n"
    )
    print(
        f"## 2. 2 seeds pooled at alpha {POOLED_ALPHA} vs 3 fixed Welch seeds at {REFERENCE_ALPHA}, "
        f"{REPS:,} simulated comparisons each\n"
    )
    print("| points pooled | tau^2 | false-positive rate: pooled, Welch 3 | power at Δ = 3.52 std: pooled, Welch 3 |")
    print("|---|---|---|---|")
    rng = np.random.default_rng(1)
    for k in (6, 8, 12, 16, 20, 24):
        for t2 in (0.0, upper):
            fp, fp_ref = simulate(k, t2, 0.0, rng)
            pw, pw_ref = simulate(k, t2, DELTA, rng)
            print(f"| {k} | {t2:.2f} | {fp:.3f}, {fp_ref:.3f} | {pw:.3f}, {pw_ref:.3f} |")
    rows = proxy_seed_rows(d)
    print(f"\n## 3. Proxy lr* from 2 seeds of 3: {len(rows)} seed pairs of {rows.model.nunique()} models\n")
    for col, what in (("ratio", "lr* ratio to the 3-seed lr*"), ("cost", "its cost on the 3-seed curve, seed stds")):
        q = rows[col].quantile([0.5, 0.9]).to_numpy()
        print(f"{what}: median {q[0]:.3g}, 90th percentile {q[1]:.3g}, max {rows[col].max():.3g}")


if __name__ == "__main__":
    main()
