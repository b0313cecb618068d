"""The report's learning-rate drift section (docs/design/parametrization.md#s12-parametrization): does lr* stay put across width?

A study gets this section when some of its variants differ in width alone: the same
`model:` but for `d_model` and `d_mlp` (a *family*), at two widths or more
(studies/mup_width.yaml; studies/width.yaml under standard parametrization). Per family:
the Akima lr* at each width (with its 95% interval from 3 seeds on, `analysis.optimum`),
and the drift, max lr* / min lr* over the widths -- the number muP should keep near 1
(the bar this project holds it to: 1.5x) and standard parametrization does not (measured
several times larger: docs/results/transfer.md).

An lr* at an edge of the grid is not bracketed: the drift is then a lower bound, and the
table says so rather than print a number that looks like a measurement. The drift is a
ratio of point estimates: no interval or verdict is claimed for it.
"""

from __future__ import annotations

import json
from collections import defaultdict

WIDTH_KEYS = ("d_model", "d_mlp")


def width_families(expanded) -> dict[str, list]:
    """family label -> its variants by increasing width, for the families with >= 2 widths."""
    groups: dict[str, list] = defaultdict(list)
    for v in expanded.variants:
        model = {k: val for k, val in v.config.model.to_mapping().items() if k not in WIDTH_KEYS}
        groups[json.dumps(model, sort_keys=True, default=str)].append(v)
    out = {}
    for members in groups.values():
        members.sort(key=lambda v: v.config.model.dims.d_model)
        if len({v.config.model.dims.d_model for v in members}) >= 2:
            out[_label(members)] = members
    return out


def _label(members) -> str:
    """The family's name: what its variants' names share once the width is taken out."""
    widths = [f"d{v.config.model.dims.d_model}" for v in members]
    parts = [v.name.replace(f"{w}_", "").replace(f"_{w}", "").replace(w, "") for v, w in zip(members, widths)]
    return parts[0] if len(set(parts)) == 1 and parts[0] else " / ".join(v.name for v in members)


def lr_drift_section(records, expanded, metric: str, console=None, published=None) -> list[str]:
    """The markdown lines ([] unless the study has width families); printed too."""
    if expanded is None:
        return []
    families = width_families(expanded)
    if not families:
        return []
    from cem_ablate.study.publication import publications

    published = published if published is not None else publications(records)
    by_key = {r.key: r for r in records}
    widths = sorted({v.config.model.dims.d_model for members in families.values() for v in members})
    lines = [
        "## Learning-rate drift across width",
        "",
        f"lr* (Akima over the grid, {metric}; 95% interval from 3 seeds on) per width; drift = max / min "
        "lr* over the family's widths. `edge`: lr* at the grid's edge, not bracketed (the drift is then a "
        "lower bound).",
        "",
        "| family | parametrization | " + " | ".join(f"d {w}" for w in widths) + " | drift |",
        "|---|---|" + "---|" * len(widths) + "---|",
    ]
    for label, members in families.items():
        cells, stars, edged = {}, [], False
        for v in members:
            record = by_key.get(v.key)
            publication = published.get(v.key) if record is not None else None
            stats = publication.statistics.stats if publication is not None else None
            optimum = stats.optimum if stats is not None else None
            if optimum is None:
                cells[v.config.model.dims.d_model] = "-"
                continue
            text = f"{optimum.lr_star:.3g}"
            if optimum.lr_interval is not None:
                text += f" [{optimum.lr_interval.low:.3g}, {optimum.lr_interval.high:.3g}]"
            if optimum.edge:
                text += f" ({optimum.edge} edge)"
                edged = True
            cells[v.config.model.dims.d_model] = text
            stars.append(optimum.lr_star)
        if len(stars) >= 2:
            drift = f"{max(stars) / min(stars):.2f}x" + (" (at least: an lr* at an edge)" if edged else "")
        else:
            drift = "-"
        parametrization = members[0].config.model.parametrization
        lines.append(
            f"| {label} | {parametrization} | " + " | ".join(cells.get(w, "") for w in widths) + f" | {drift} |"
        )
    if console is not None:
        for line in lines:
            console.print(line, markup=False, highlight=False)
    return lines
