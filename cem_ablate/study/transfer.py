"""`lr_search: {method: transfer, proxy: {...}, grid: [...]}`: tune small, train large.

A transfer study is two ordinary grid studies run one after the other:

1. the proxy study `<name>_proxy`: every variant (baselines included) with the `proxy`
   overrides applied (`ExpandedStudy.proxies`, e.g. d_model 64 under `parametrization: mup`),
   each on the full `grid` with `proxy_seeds` (default the study's seeds), fitted by Akima;
2. the target study `<name>`: every variant at one learning rate only, its proxy's lr*
   (rounded to 3 significant digits), with the study's seeds; its comparisons are decided as
   in any study (each variant at its own learning rate: the "optima" test, docs/guides/learning-rate-transfer.md).

Both are ordinary trials keyed by their run configs, so another study's proxy or target
trials with the same keys are reused. The report states each variant's proxy, the proxy's lr*
with its interval and "transferred" (`reporting/transfer_report.py`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cem_ablate.study.variants import ExpandedStudy, Variant, optuna_study_name

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

SIGNIFICANT_DIGITS = 3


@dataclass(frozen=True)
class ProxyOptimum:
    """What the target of one proxy trains at, and where that came from."""

    proxy: str  # proxy variant key
    lr_star: float  # the Akima optimum of the proxy's seed means
    lr: float  # lr_star rounded: the target's one learning rate
    lr_interval: tuple[float, float] | None
    edge: str | None  # "low"/"high" when lr* is at the grid's end (only a bound)


def is_transfer(expanded: ExpandedStudy) -> bool:
    return expanded.spec.lr_search.method == "transfer"


def proxy_seeds(expanded: ExpandedStudy) -> list[int]:
    search = expanded.spec.lr_search
    return list(search.proxy_seeds) if search.proxy_seeds is not None else list(expanded.spec.seeds)


def proxy_study(expanded: ExpandedStudy) -> ExpandedStudy:
    """Phase 1: the proxies on the full grid, an ordinary grid study named `<name>_proxy`."""
    spec = expanded.spec
    search = dataclasses.replace(spec.lr_search, method="grid", proxy=None, proxy_seeds=None)
    proxy_spec = dataclasses.replace(
        spec, name=f"{spec.name}_proxy", lr_search=search, seeds=proxy_seeds(expanded), forecast=None
    )  # the proxies are tuned, not forecast
    return ExpandedStudy(proxy_spec, list(expanded.proxies), expanded.mapping)


def _proxy_key(variant: Variant) -> str:
    assert variant.proxy is not None  # every variant of a transfer study has its proxy (variants._proxies)
    return variant.proxy


def target_study(expanded: ExpandedStudy, optima: dict[str, ProxyOptimum]) -> ExpandedStudy:
    """Phase 2: every variant at its proxy's rounded lr* only."""
    spec = expanded.spec
    targets = [dataclasses.replace(v, lr_grid=(optima[_proxy_key(v)].lr,)) for v in expanded.variants]
    grid = sorted({optima[_proxy_key(v)].lr for v in expanded.variants})  # each target's one lr_grid rate
    search = dataclasses.replace(spec.lr_search, method="grid", grid=grid, proxy=None, proxy_seeds=None)
    return ExpandedStudy(dataclasses.replace(spec, lr_search=search), targets, expanded.mapping)


def round_lr(lr: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    return float(f"{lr:.{digits - 1}e}") if lr > 0 and math.isfinite(lr) else lr


def proxy_optima(proxies: ExpandedStudy, storage: BaseStorage) -> dict[str, ProxyOptimum]:
    """Each proxy's Akima lr* from its finished trials in the storage (read only; the proxy study
    has run). A proxy with no finished trial has no entry."""
    from cem_ablate.analysis.statistics import observations, variant_stats
    from cem_ablate.study.trials import VariantTrials

    spec = proxies.spec
    out: dict[str, ProxyOptimum] = {}
    for proxy in proxies.variants:
        trials, _ = VariantTrials.open(
            storage, "", optuna_study_name(spec.name, proxy), spec.lr_search, spec.seeds, trial_key=proxy.trial_key
        )
        stats = variant_stats(observations(trials.points()), spec.lr_search.interpolation)
        if stats.optimum is None:
            continue
        interval = stats.optimum.lr_interval
        out[proxy.key] = ProxyOptimum(
            proxy.key,
            stats.optimum.lr_star,
            round_lr(stats.optimum.lr_star),
            (interval.low, interval.high) if interval is not None else None,
            stats.optimum.edge,
        )
    return out


def missing_optima(expanded: ExpandedStudy, optima: dict[str, ProxyOptimum]) -> list[str]:
    """Names of the variants whose proxy has no lr* (no finished trial): their target can't run."""
    return [v.name for v in expanded.variants if v.proxy not in optima]


def transfer_lines(expanded: ExpandedStudy, optima: dict[str, ProxyOptimum]) -> list[str]:
    """One line per variant: its proxy, the proxy's lr* (interval, edge) and the transferred lr."""
    proxies = {p.key: p for p in expanded.proxies}
    lines = []
    for v in expanded.variants:
        opt = optima.get(_proxy_key(v))
        if opt is None:
            lines.append(f"{v.name}: proxy {proxies[_proxy_key(v)].name} has no finished trial: no lr* to transfer")
            continue
        interval = f" [{opt.lr_interval[0]:.3g}, {opt.lr_interval[1]:.3g}]" if opt.lr_interval else ""
        edge = f" (at the grid's {opt.edge} edge: only a bound)" if opt.edge else ""
        lines.append(f"{v.name}: proxy lr* {opt.lr_star:.3g}{interval}{edge} -> transferred lr {opt.lr:g}")
    return lines
