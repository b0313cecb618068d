"""The report's forecast section (`forecast:` in the study file, study.spec.ForecastConfig).

Every family (a variant or a baseline, across the ladder's widths) trained at its proxy's
transferred lr*; its objective fitted against its parameter count by the study's form
(`analysis.forecast`) and carried to the target size, which was never trained. Printed:
how far the forecast reaches beyond the ladder (in parameters), the fit (its residual
against the seed spread, the lack-of-fit test), each form's error forecasting the ladder's
widest width from the narrower ones on this study's own trials, each family's forecast
objective with its prediction interval, and each comparison's forecast Δ (a log-ratio) with
its interval and forecast verdict. The section says plainly that all of it is an
extrapolation: a forecast verdict is not a measured one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from cem_ablate.analysis.forecast import (
    FORMS,
    MIN_RUNGS,
    Rung,
    extrapolation,
    fit_ladders,
    forecast,
    forecast_delta,
    holdout_errors,
)
from cem_ablate.config.trial_status import TrialStatus


def forecast_section(records, expanded, metric: str, console=None) -> list[str]:
    """The markdown lines ([] unless the study file has `forecast:`); printed too."""
    if expanded is None or expanded.spec.forecast is None:
        return []
    from cem_ablate.study.estimates import estimate
    from cem_ablate.study.trusted_widths import untrusted_widths

    spec = expanded.spec
    lr, seed = spec.lr_search.lr_range[0], spec.seeds[0]

    def params(variant) -> float:
        return float(estimate(variant.run_config(lr, seed)).params_total)

    by_key = {r.key: r for r in records}
    ladders: dict[str, list[Rung]] = {}
    for v in expanded.variants:
        record = by_key.get(v.key)
        values = tuple(
            t.value
            for t in (record.trials if record else [])
            if t.status == TrialStatus.FINISHED and t.value is not None
        )
        if values:
            ladders.setdefault(v.family, []).append(Rung(params(v), values))
    family_of = {v.key: v.family for v in expanded.variants}
    comparisons = sorted(
        {(v.family, family_of[key]) for v in expanded.variants if v.role == "variant" for key in v.baselines.values()}
    )
    targets = {t.family: params(t) for t in expanded.forecast_targets}
    untrusted = [u.text() for u in untrusted_widths(expanded) if u.role == "ladder width"]
    lines = forecast_lines(ladders, targets, comparisons, spec.forecast, metric, untrusted)
    if console is not None:
        for line in lines:
            console.print(line, markup=False, highlight=False)
    return lines


def forecast_lines(
    ladders: Mapping[str, Sequence[Rung]],
    targets: Mapping[str, float],
    comparisons: Sequence[tuple[str, str]],
    config,
    metric: str,
    untrusted: Sequence[str] = (),
) -> list[str]:
    """The section from the measured ladders (family -> rungs with finished trials), each family's
    parameters at the target and the (variant, baseline) family pairs; `untrusted`: the ladder's
    widths outside the trusted range (`study.trusted_widths`), each as its warning names it."""
    widths = ", ".join(str(w) for w in config.widths)
    target_width = config.target["model.d_model"]
    lines = ["## Forecast", ""]
    short = sorted(f for f in targets if len(ladders.get(f, ())) < MIN_RUNGS)
    if short:
        lines.append(
            f"No forecast: {', '.join(short)} finished fewer than {MIN_RUNGS} of the ladder's widths "
            f"(d_model {widths}); rerun the study to finish them."
        )
        return lines
    if any(v <= 0 for rungs in ladders.values() for r in rungs for v in r.values):
        lines.append(f"No forecast: the law is fitted to log {metric}, and some values are not positive.")
        return lines
    fit = fit_ladders({f: ladders[f] for f in targets}, config.form)
    reach = max(extrapolation({f: ladders[f]}, targets[f]) for f in targets)
    level = f"{config.level:.0%}"
    lines += [
        f"**An extrapolation, not a measurement.** Every family was trained at d_model {widths} (each width at its "
        f"proxy's transferred lr*); its {metric} is fitted against its parameter count ({config.form}, "
        "`analysis.forecast`) and carried to d_model "
        f"{target_width}, which was not trained: up to {reach:.3g}x the parameters of the widest width trained. "
        f"Intervals are {level} prediction intervals for the seed mean there (the fit's uncertainty and the "
        "rungs' scatter about the law, seeds included); a forecast verdict is each comparison's interval alone "
        "(no family-wise correction) and holds only as far as the law does.",
        "",
        f"Fit: {len(fit.variants)} families, {fit.df} residual degrees of freedom; "
        + (
            f"a width's seed mean scatters {math.sqrt(fit.unit_var):.3g} about the law (log units) against "
            f"{math.sqrt(fit.seed_var / fit.seeds):.3g} from the seeds alone, lack-of-fit p {fit.lack_of_fit_p:.2g}"
            if fit.df > 0
            else "no residual, so no interval: add a width to the ladder"
        )
        + f"; exponent {_exponent_text(fit)}.",
        "",
    ]
    if untrusted:
        # The bias was measured, not modelled: the forecast says so and changes nothing (the
        # correction tried there did not hold), docs/results/forecast.md "The bias of the forecasts".
        lines += [
            f"**These forecasts may run low.** The ladder has widths outside the trusted range "
            f"({'; '.join(untrusted)}). On the measured ladders of this kind (docs/results/forecast.md, "
            f'"The bias of the forecasts") every family\'s forecast {metric} was below the measurement, with a '
            "mean error whose interval lay below 0, and by different amounts, so a comparison's Δ can be off "
            "too; the intervals below are not widened or shifted for it.",
            "",
        ]
    errors = [h for h in holdout_errors({f: ladders[f] for f in targets}, FORMS) if h.identifiable]
    if errors:
        lines += [
            "Each form forecasting the widest width from the narrower ones on these trials (RMS error, log "
            "units): " + ", ".join(f"{h.form} {h.rms:.3g}" for h in errors) + ".",
            "",
        ]
    lines += [f"| family | parameters at d_model {target_width} | forecast {metric} [{level}] |", "|---|---|---|"]
    for family in fit.variants:
        fc = forecast(fit, family, targets[family], config.level)
        lines.append(f"| {family} | {targets[family]:,.0f} | {fc.value:.4g} [{_exp(fc.low)}, {_exp(fc.high)}] |")
    lines += ["", f"| comparison | forecast Δ log-ratio [{level}] | as % | forecast verdict |", "|---|---|---|---|"]
    for variant, baseline in comparisons:
        d = forecast_delta(fit, variant, baseline, targets[variant], targets[baseline], config.level)
        lines.append(
            f"| {variant} vs {baseline} | {d.delta:+.3f} [{d.low:+.3f}, {d.high:+.3f}] | "
            f"{100 * math.expm1(d.delta):+.1f}% | {d.verdict} |"
        )
    return lines


def _exp(log_value: float) -> str:
    return f"{math.exp(log_value):.4g}" if math.isfinite(log_value) else ("inf" if log_value > 0 else "0")


def _exponent_text(fit) -> str:
    K = len(fit.variants)
    if fit.form == "power":
        return "per family " + ", ".join(f"{a:.3g}" for a in fit.theta[K:])
    return f"α {fit.theta[-1]:.3g} shared by every family"
