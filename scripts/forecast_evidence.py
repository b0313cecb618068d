"""Forecast evidence on CPU: every held-out case of the measured width ladders.

For each ladder of trial CSVs (below), forecast the widest measured width from the narrower
ones with `cem_ablate.analysis.forecast` and set the forecast beside the measurement: each
variant's perplexity (its prediction interval covers the measured seed mean or not) and each
comparison's Δ (log-ratio) with the forecast verdict against the measured one.

Ladders:
- `mup`: the muP width studies (600 steps, 2 layers, 4 heads, base d 64; studies/mup_width.yaml,
  CSVs docs/figures/cpu_217a9b8_trials.csv and cpu_70eff9c_trials.csv), five families at
  d 32, 64, 128 -> d 256. Each rung at the rate a forecast study trains it at, the d 64 proxy's
  lr* as the CPU transfer studies rounded it (studies/transfer.yaml, 3 proxy seeds): the grid rate
  nearest it (the grid is sqrt(2)-spaced). The held-out d 256 is those transfer studies' targets,
  trained at that rate exactly. Comparisons: each family against Llama.
- `width`: the width study (standard parametrization, 600 steps; studies/width.yaml, its reports
  docs/figures/width_cpu/report.md and width_wide_cpu/report.md), Llama and CEM attention T = 1,
  T = 2 at d 32, 64, 128 -> d 192, each width at its own best grid rate (no transfer under
  standard parametrization). Comparisons: T = 1 and T = 2 against Llama, T = 2 against T = 1.

- `mup_gpu` (not CPU, an extra check; not used to choose the form): the same muP ladders from the
  GPU leases (docs/figures/mup_width_gpu_scaled/trials.csv, trials_lease2.csv), held out at the
  GPU transfer study's d 256 targets (3 proxy seeds).

Each ladder is forecast from d 32 on (three rungs; the trusted-width rule flags d 32, d_head 8:
`cem_ablate/study/trusted_widths.py`) and from d 64 on (two rungs: the trusted widths; below
the study key's minimum of three, so only forms with a shared exponent are identifiable).

The form is chosen by held-out error inside the three-rung ladders only (forecast d 128 from
d 32 and 64), never on the cases it is then scored on; a form with more parameters is chosen
only if its error is more than 1% below a simpler one's. The measured verdict is the platform's
rule on the held-out width's trials: Welch t at α 0.05, Holm over the ladder's comparisons.

    python scripts/forecast_evidence.py            # the tables of docs/results/forecast.md
    python scripts/forecast_evidence.py --form floor_shared
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from cem_ablate.analysis.decision import Design, adjust, decide  # noqa: E402
from cem_ablate.analysis.forecast import (  # noqa: E402
    FORMS,
    Rung,
    extrapolation,
    fit_ladders,
    forecast,
    forecast_delta,
    holdout_errors,
    n_params,
)

FIGURES = ROOT / "docs" / "figures"
MUP_CSVS = (FIGURES / "cpu_217a9b8_trials.csv", FIGURES / "cpu_70eff9c_trials.csv")
MUP_TRANSFERS = "transfer_cpu_first,transfer_cpu_attention_T2,transfer_cpu_full_cem"  # 3 proxy seeds each
GPU = FIGURES / "mup_width_gpu_scaled"
GPU_CSVS = (GPU / "trials.csv", GPU / "trials_lease2.csv")  # H200 and H100 leases, the GPU machine's corpus
MUP_FAMILIES = ("llama", "cem_attention_T1", "cem_attention_T2", "cem_mlp_T1", "full_cem_T2")
WIDTH_REPORTS = (FIGURES / "width_cpu" / "report.md", FIGURES / "width_wide_cpu" / "report.md")
WIDTH_FAMILIES = ("llama", "T1", "T2")
LEVEL = 0.90


@dataclass
class Ladder:
    """One data set: per family, per width, the per-seed objectives at the rung's rate."""

    name: str
    widths: tuple[int, ...]  # the measured widths, the widest held out
    rungs: dict[str, dict[int, dict[int, float]]]  # family -> width -> seed -> objective
    params: dict[str, dict[int, float]]  # family -> width -> parameter count
    comparisons: tuple[tuple[str, str], ...]  # (variant, baseline)
    rates: dict[str, dict[int, float]]  # family -> width -> the rate of the rung

    def ladder(self, widths) -> dict[str, list[Rung]]:
        return {f: [Rung(self.params[f][d], tuple(self.rungs[f][d].values())) for d in widths] for f in self.rungs}


def _nearest(rates, lr: float) -> float:
    return min(rates, key=lambda r: abs(math.log(r / lr)))


def _params(study: str, scale: str) -> dict[str, float]:
    """Variant name -> parameter count (the dry run's, model on the meta device)."""
    from cem_ablate.study.estimates import estimate
    from cem_ablate.study.spec import load_study_mapping, parse_study
    from cem_ablate.study.variants import expand

    mapping = load_study_mapping(ROOT / "studies" / study, scale)
    expanded = expand(parse_study(mapping), mapping)
    lr, seed = expanded.spec.lr_search.lr_range[0], expanded.spec.seeds[0]
    return {v.name: float(estimate(v.run_config(lr, seed)).params_total) for v in expanded.variants}


def mup_ladder(
    name: str = "mup",
    csvs=MUP_CSVS,
    transfers: str = MUP_TRANSFERS,
    studies: str = "mup_width_cpu",
    proxies: str = "none",
) -> Ladder:
    from mup_width_csv_report import read_trials

    values, targets = read_trials([str(p) for p in csvs], None, transfer=transfers, studies=studies, proxies=proxies)
    params = _params("mup_width.yaml", "cpu")
    rungs, counts, rates = defaultdict(dict), defaultdict(dict), defaultdict(dict)
    for family in MUP_FAMILIES:
        (lr,) = {lr for points in targets[family].values() for lr in points}  # the transferred rate
        for d in (32, 64, 128):
            per_seed = values[f"d{d}_{family}"]
            rate = _nearest({r for p in per_seed.values() for r in p}, lr)
            rungs[family][d] = {s: p[rate] for s, p in sorted(per_seed.items())}
            rates[family][d] = rate
        rungs[family][256] = {s: p[lr] for s, p in sorted(targets[family].items())}
        rates[family][256] = lr
        for d in (32, 64, 128, 256):
            counts[family][d] = params[f"d{d}_{family}"]
    return Ladder(
        name, (32, 64, 128, 256), dict(rungs), dict(counts), tuple((f, "llama") for f in MUP_FAMILIES[1:]), dict(rates)
    )


def width_ladder() -> Ladder:
    from report_trials_csv import report_rows

    values = defaultdict(lambda: defaultdict(dict))  # variant -> lr -> seed -> value
    for path in WIDTH_REPORTS:
        for row in report_rows(path.read_text(encoding="utf-8")):
            if row[4] == "COMPLETE":
                values[row[1]][row[2]][row[3]] = row[6]
    params = _params("width.yaml", "cpu")
    rungs, counts, rates = defaultdict(dict), defaultdict(dict), defaultdict(dict)
    for family in WIDTH_FAMILIES:
        for d in (32, 64, 128, 192):
            by_lr = values[f"d{d}_{family}"]
            seeds = max(len(s) for s in by_lr.values())
            complete = {lr: s for lr, s in by_lr.items() if len(s) == seeds}
            rate = min(complete, key=lambda lr: np.mean(list(complete[lr].values())))  # its own best rate
            rungs[family][d] = dict(sorted(complete[rate].items()))
            rates[family][d] = rate
            counts[family][d] = params[f"d{d}_{family}"]
    return Ladder(
        "width",
        (32, 64, 128, 192),
        dict(rungs),
        dict(counts),
        (("T1", "llama"), ("T2", "llama"), ("T2", "T1")),
        dict(rates),
    )


def measured_decisions(ladder: Ladder, width: int) -> dict[tuple[str, str], object]:
    """The platform's verdicts at the held-out width: Welch at α 0.05, Holm over the comparisons."""
    seeds = len(next(iter(ladder.rungs.values()))[width])
    design = Design.fixed(seeds, 0.05)
    raw = [
        decide(ladder.rungs[v][width], ladder.rungs[b][width], paired=False, design=design)
        for v, b in ladder.comparisons
    ]
    return dict(zip(ladder.comparisons, adjust(raw, alpha=0.05, correction="holm")))


def choose_form(ladders: list[Ladder]) -> tuple[str, list[str]]:
    """The form with the least RMS error forecasting d 128 from d 32 and 64, pooled over the
    ladders (the three-rung ladders' own rungs only); and the table's lines."""
    errors = defaultdict(list)
    for ladder in ladders:
        for h in holdout_errors(ladder.ladder(ladder.widths[:3]), FORMS):
            errors[h.form].extend(h.errors.values() if h.identifiable else [float("nan")])
    lines = [
        "| form | parameters | RMS error forecasting d 128 from d 32, 64 (log units, pooled over "
        "the ladders' families) | largest |",
        "|---|---|---|---|",
    ]
    rms = {}
    for form in FORMS:
        e = np.asarray(errors[form])
        if np.isnan(e).any():
            lines.append(f"| {form} | {_param_text(form)} | not identifiable from two rungs | |")
            continue
        rms[form] = float(np.sqrt(np.mean(e**2)))
        lines.append(f"| {form} | {_param_text(form)} | {rms[form]:.4f} ({len(e)} cases) | {np.max(np.abs(e)):.4f} |")
    # a form with more parameters is chosen only if it beats a simpler one by more than 1%
    best = min(rms.values())
    simplest = min((f for f in rms if rms[f] <= 1.01 * best), key=lambda f: (n_params(f, 2), FORMS.index(f)))
    return simplest, lines


def _param_text(form: str) -> str:
    return {
        "power": "c, α per variant",
        "power_shared": "c per variant, α shared",
        "saturating_shared": "E, A per variant, α shared",
        "floor_shared": "A per variant, E and α shared",
    }[form]


def cases(ladder: Ladder, rungs: tuple[int, ...], form: str):
    """Every held-out case of `ladder` forecast from `rungs`: (point rows, delta rows, fit)."""
    held = ladder.widths[-1]
    fit = fit_ladders(ladder.ladder(rungs), form)
    points = []
    for family in ladder.rungs:
        fc = forecast(fit, family, ladder.params[family][held], LEVEL)
        measured = float(np.mean(np.log(list(ladder.rungs[family][held].values()))))
        points.append((family, fc, measured))
    decisions = measured_decisions(ladder, held)
    deltas = []
    for variant, baseline in ladder.comparisons:
        fd = forecast_delta(fit, variant, baseline, ladder.params[variant][held], ladder.params[baseline][held], LEVEL)
        measured = float(np.mean(np.log(list(ladder.rungs[variant][held].values())))) - float(
            np.mean(np.log(list(ladder.rungs[baseline][held].values())))
        )
        deltas.append((variant, baseline, fd, measured, decisions[(variant, baseline)]))
    return points, deltas, fit


@dataclass(frozen=True)
class Bias:
    """The mean error of a ladder's perplexity forecasts, ln forecast − ln measured over its
    families, with its prediction interval."""

    mean: float
    low: float
    high: float
    level: float
    families: int

    @property
    def half(self) -> float:
        return (self.high - self.low) / 2


def forecast_bias(fit, params: dict[str, float], measured: dict[str, float], level: float = LEVEL) -> Bias:
    """Mean over the families of ẑ_k − z_k at their targets, with the interval the forecast's own
    model gives it when the law holds: t on the fit's residual df times √(ḡ Cov ḡᵀ + v / K), ḡ the
    families' mean gradient (the fit's shared error), v / K the K targets' own independent scatter
    (a rung's departure and its seeds, as for one forecast). Coverage checked by simulation in
    tests/analysis/test_forecast_evidence.py."""
    from scipy import stats

    names = list(params)
    zs, gs = zip(*(fit.predict(k, params[k]) for k in names))
    mean = float(np.mean([z - measured[k] for z, k in zip(zs, names)]))
    g = np.mean(gs, axis=0)
    if fit.df < 1:
        return Bias(mean, -math.inf, math.inf, level, len(names))
    half = float(
        stats.t.ppf(0.5 + level / 2, fit.df) * math.sqrt(max(float(g @ fit.cov @ g), 0.0) + fit.unit_var / len(names))
    )
    return Bias(mean, mean - half, mean + half, level, len(names))


def ladder_bias(ladder: Ladder, rungs: tuple[int, ...], held: int, form: str, level: float = LEVEL) -> Bias:
    """The bias of `ladder`'s forecasts of width `held` from the widths `rungs`."""
    fit = fit_ladders(ladder.ladder(rungs), form)
    params = {f: ladder.params[f][held] for f in ladder.rungs}
    measured = {f: float(np.mean(np.log(list(ladder.rungs[f][held].values())))) for f in ladder.rungs}
    return forecast_bias(fit, params, measured, level)


def corrected_cases(ladder: Ladder, rungs: tuple[int, ...], form: str, level: float = LEVEL):
    """The correction rule, fixed from the ladder alone before it is scored at the held-out width:
    forecast the ladder's widest rung from its narrower ones (leave-widest-out inside the
    ladder), take the mean error b and its interval; the corrected forecast at the target is
    ẑ − b, its half-width √(h² + h_b²) (h the forecast's, h_b the in-ladder bias's). Returns the
    in-ladder bias and per family (forecast, corrected low, corrected high, measured)."""
    from cem_ablate.analysis.forecast import forecast as point_forecast

    inner = ladder_bias(ladder, rungs[:-1], rungs[-1], form, level)
    held = ladder.widths[-1]
    fit = fit_ladders(ladder.ladder(rungs), form)
    rows = []
    for family in ladder.rungs:
        fc = point_forecast(fit, family, ladder.params[family][held], level)
        half = math.sqrt(((fc.high - fc.low) / 2) ** 2 + inner.half**2)
        centre = fc.log_value - inner.mean
        measured = float(np.mean(np.log(list(ladder.rungs[family][held].values()))))
        rows.append((family, centre, centre - half, centre + half, measured))
    return inner, rows


def _pct(log_ratio: float) -> str:
    return f"{100 * math.expm1(log_ratio):+.1f}%"


def print_cases(ladder: Ladder, rungs: tuple[int, ...], form: str, totals: dict) -> None:
    held = ladder.widths[-1]
    points, deltas, fit = cases(ladder, rungs, form)
    reach = extrapolation(ladder.ladder(rungs), ladder.params[ladder.comparisons[0][1]][held])
    print(f"\n### `{ladder.name}`: d {', '.join(map(str, rungs))} -> d {held} ({form}, {LEVEL:.0%} intervals)\n")
    print(
        f"Fit: {fit.df} residual df; residual sd of a rung mean {math.sqrt(fit.unit_var):.4f} against the seed "
        f"sd / sqrt(seeds) {math.sqrt(fit.seed_var / fit.seeds):.4f} (lack of fit p {fit.lack_of_fit_p:.2g}); "
        f"the target has {reach:.2f}x the largest rung's parameters (Llama's).\n"
    )
    print("| variant | rates (rungs; held out) | forecast ppl [90%] | measured ppl (mean of seeds) | error | covered |")
    print("|---|---|---|---|---|---|")
    for family, fc, measured in points:
        covered = fc.covers(measured)
        totals["points"].append(covered)
        rates = ", ".join(f"{ladder.rates[family][d]:.3g}" for d in rungs) + f"; {ladder.rates[family][held]:.3g}"
        print(
            f"| {family} | {rates} | {fc.value:.3f} [{math.exp(fc.low):.3f}, {math.exp(fc.high):.3f}] | "
            f"{math.exp(measured):.3f} | {_pct(fc.log_value - measured)} | {'yes' if covered else '**no**'} |"
        )
    print(
        "\n| comparison | forecast Δ log-ratio [90%] | forecast verdict | measured Δ log-ratio | measured verdict "
        "(Welch, Holm p) | covered | verdicts agree |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant, baseline, fd, measured, decision in deltas:
        covered = fd.covers(measured)
        totals["deltas"].append(covered)
        if decision.verdict != "unresolved":
            agree = fd.verdict == decision.verdict
            totals["resolved"].append(agree)
            agree_text = "yes" if agree else "**no**"
        else:
            agree_text = "(measured unresolved)"
            totals["unresolved_forecast"].append(fd.verdict)
        print(
            f"| {variant} vs {baseline} | {fd.delta:+.3f} [{fd.low:+.3f}, {fd.high:+.3f}] ({_pct(fd.delta)}) | "
            f"{fd.verdict} | {measured:+.3f} ({_pct(measured)}) | {decision.verdict} (p {decision.p_holm:.2g}) | "
            f"{'yes' if covered else '**no**'} | {agree_text} |"
        )


def summary(name: str, totals: dict) -> None:
    p, d, r = totals["points"], totals["deltas"], totals["resolved"]
    print(
        f"\n**{name}**: perplexities covered {sum(p)}/{len(p)} ({np.mean(p):.0%}); comparisons' Δ covered "
        f"{sum(d)}/{len(d)} ({np.mean(d):.0%}); all {len(p) + len(d)} intervals {sum(p) + sum(d)}/{len(p) + len(d)} "
        f"({np.mean(p + d):.0%}); verdicts agree where the measured one is resolved {sum(r)}/{len(r)}"
        + (
            f"; where it is unresolved the forecast says {', '.join(totals['unresolved_forecast'])}"
            if totals["unresolved_forecast"]
            else ""
        )
    )


def trust_table() -> None:
    """The trusted-width rule's evidence on this recipe: each family's lr* per width (Akima on the
    3-seed mean, as the reports fit it) and its drift over every width against the drift over the
    trusted widths (d_head >= 16: d 64 up)."""
    from mup_width_csv_report import _stats, read_trials

    values, _ = read_trials(
        [str(p) for p in MUP_CSVS], None, transfer=MUP_TRANSFERS, studies="mup_width_cpu", proxies="none"
    )
    print(
        "| family | lr* d 32 (d_head 8) | d 64 | d 128 | d 256 | drift d 32-256 | drift d 64-256 | "
        "d 32's lr* / d 64's |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for family in MUP_FAMILIES:
        stars = {d: _stats(values[f"d{d}_{family}"]).optimum.lr_star for d in (32, 64, 128, 256)}
        every, trusted = stars.values(), [stars[d] for d in (64, 128, 256)]
        print(
            f"| {family} | "
            + " | ".join(f"{stars[d]:.3g}" for d in (32, 64, 128, 256))
            + f" | {max(every) / min(every):.2f}x | {max(trusted) / min(trusted):.2f}x | {stars[32] / stars[64]:.2f} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, help="score this form (default: the one chosen by held-out error)")
    args = parser.parse_args(argv)
    print("## Which proxies to trust: lr* across width, 600 steps (`mup` ladder's recipe)\n")
    trust_table()
    ladders = [mup_ladder(), width_ladder()]
    chosen, lines = choose_form(ladders)
    print("\n## Choosing the form (forecast d 128 from d 32, 64; the held-out widths below take no part)\n")
    print("\n".join(lines))
    form = args.form or chosen
    print(f"\nChosen: {chosen}" + (f"; scored: {form} (--form)" if form != chosen else ""))
    for label, start in (("three rungs, from d 32", 0), ("two rungs, the trusted widths, from d 64", 1)):
        print(f"\n## Held out: the widest width, {label}")
        totals = defaultdict(list)
        for ladder in ladders:
            print_cases(ladder, ladder.widths[start:-1], form, totals)
        summary(label, totals)
    print(
        "\n## Not CPU: the GPU leases' muP ladders (the same recipe on the GPU machine's corpus; the form as "
        "chosen above)"
    )
    gpu = mup_ladder("mup_gpu", GPU_CSVS, "transfer_gpu_scaled", "mup_width_gpu", "transfer_gpu")
    for label, start in (("three rungs, from d 32", 0), ("two rungs, from d 64", 1)):
        totals = defaultdict(list)
        print_cases(gpu, gpu.widths[start:-1], form, totals)
        summary(f"GPU, {label}", totals)
    print(
        "\n## Every form on the held-out widths (RMS error of the perplexity forecasts, log units; coverage of "
        "all 90% intervals)\n"
    )
    print(
        "| form | "
        + " | ".join(f"{ladder.name} from d {ladder.widths[s]}" for s in (0, 1) for ladder in ladders)
        + " |"
    )
    print("|---|" + "---|" * (2 * len(ladders)))
    for f in FORMS:
        cells = []
        for start in (0, 1):
            for ladder in ladders:
                try:
                    points, deltas, _ = cases(ladder, ladder.widths[start:-1], f)
                except ValueError:
                    cells.append("not identifiable")
                    continue
                rms = math.sqrt(np.mean([(fc.log_value - m) ** 2 for _, fc, m in points]))
                hits = [fc.covers(m) for _, fc, m in points] + [fd.covers(m) for _, _, fd, m, _ in deltas]
                cells.append(f"{rms:.4f}; {sum(hits)}/{len(hits)}")
        print(f"| {f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
