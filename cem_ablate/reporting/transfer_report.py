"""The report's transfer section (lr_search method transfer, study/transfer.py).

Per variant: its proxy, the proxy's lr* with its 95% interval (from the proxy study's published
statistics, `<study>_proxy` in MLflow), the learning rate the variant was trained at
("transferred"), and its objective there over the study's seeds. The comparisons of the
variants themselves are the report's usual table (each variant at its one learning rate).
"""

from __future__ import annotations

from cem_ablate.config.trial_status import TrialStatus

# Above this ratio of a proxy lr*'s 95% interval (high / low) the report says the transferred
# rate is uncertain: measured, the proxies whose intervals were wider than this missed the
# target's optimum by more than those whose intervals were narrower, on GPU and on CPU (figures:
# docs/results/transfer.md and docs/lab-notes/from-code-comments.md). Five
# families: a note to the reader, not a test.
WIDE_PROXY_INTERVAL = 2.0


def transfer_section(records, expanded, tracking_uri: str, metric: str, console=None) -> list[str]:
    """The markdown lines ([] unless the study file's lr_search is a transfer); printed too."""
    if expanded is None or expanded.spec.lr_search.method != "transfer":
        return []
    from cem_ablate.analysis.statistics import VariantStatistics
    from cem_ablate.tracking.readback import read_study

    proxy_name = f"{expanded.spec.name}_proxy"
    try:
        proxy_records = {r.key: r for r in read_study(tracking_uri, proxy_name, [p.key for p in expanded.proxies])}
    except LookupError:
        proxy_records = {}
    names = {p.key: p.name for p in expanded.proxies}
    by_key = {r.key: r for r in records}
    proxy_text = ", ".join(f"{k}: {v}" for k, v in expanded.spec.lr_search.proxy.items())
    lines = [
        "## Transfer",
        "",
        f"Each variant's learning rate was tuned on its proxy ({proxy_text}; study `{proxy_name}`, grid "
        f"{', '.join(f'{lr:g}' for lr in expanded.spec.lr_search.grid)}, Akima) and transferred: the variant "
        f"trained only at its proxy's lr* (3 significant digits).",
        "",
        f"| variant | proxy | proxy lr* [95%] | interval high/low | transferred lr | "
        f"{metric} at it (mean ± std, seeds) |",
        "|---|---|---|---|---|---|",
    ]
    widths = []
    for v in expanded.variants:
        proxy = proxy_records.get(v.proxy)
        stats = VariantStatistics.from_dict(proxy.stats).stats if proxy is not None and proxy.stats else None
        optimum = stats.optimum if stats is not None else None
        span = "-"
        if optimum is None:
            star = "-"
        else:
            interval = optimum.lr_interval
            if interval is not None and interval.low > 0:
                widths.append(interval.high / interval.low)
                span = f"{widths[-1]:.2f}x"
            star = f"{optimum.lr_star:.3g}" + (
                f" [{interval.low:.3g}, {interval.high:.3g}]"
                if interval
                else f" ({optimum.interval_note or 'no interval'})"
            )
            star += f", at the grid's {optimum.edge} edge" if optimum.edge else ""
        record = by_key.get(v.key)
        values = [t.value for t in (record.trials if record else []) if t.status == TrialStatus.FINISHED]
        lrs = sorted({t.lr for t in (record.trials if record else [])})
        lr_text = ", ".join(f"{lr:g}" for lr in lrs) or "-"
        if values:
            import numpy as np

            spread = f" ± {np.std(values, ddof=1):.3g}" if len(values) > 1 else ""
            objective = f"{np.mean(values):.4g}{spread} ({len(values)})"
        else:
            objective = "-"
        lines.append(
            f"| {v.name} | {names.get(v.proxy, v.proxy)} | {star} | {span} | {lr_text} (transferred) | {objective} |"
        )
    lines += wide_proxy_note(widths)
    if console is not None:
        for line in lines:
            console.print(line, markup=False, highlight=False)
    return lines


def wide_proxy_note(widths: list[float]) -> list[str]:
    """The lines under the table when a proxy's lr* interval (high / low) is wide."""
    if not any(w > WIDE_PROXY_INTERVAL for w in widths):
        return []
    return [
        "",
        f"A proxy lr* whose 95% interval spans more than {WIDE_PROXY_INTERVAL:g}x is poorly determined, and "
        "so is the rate transferred from it: more proxy seeds (`lr_search.proxy_seeds`) narrow it at the "
        "proxy's price (docs/results/transfer.md: on a lent GPU, d 64 -> d 256, the two families whose "
        "transferred rate missed the target's full-grid optimum by more than 1% had proxy intervals of 5.7x "
        "and 2.6x; the three within 1% had 1.5-1.9x; on CPU, CEM MLP T = 1's interval was 6.7x, 2.3x and 1.7x "
        "with 3, 5 and 8 proxy seeds, its target +3.8%, +2.3% and +0.7% from the optimum).",
    ]
