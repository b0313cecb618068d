"""Where learning-rate transfer has been shown to hold: the one rule, and its warning line.

Under `parametrization: mup` (docs/design/parametrization.md#s12-parametrization) a proxy's lr* is trained at other widths (a transfer
target, a forecast's ladder). Measured on two recipes (docs/results/forecast.md, "Which
proxies to trust"), lr* held within the drift bound from d_head 16 up, at and above the base
width, and the narrowest width measured (4 heads at d_model 32: d_head 8, below the base width
64) is where it departed; on the shorter recipe far enough that a proxy or ladder rung there
would train at the wrong rate. The two conditions coincide in every measurement, so the rule
keeps both: a width is trusted when

    d_head >= MIN_TRUSTED_HEAD_DIM  and  d_model >= base_d_model.

Below the base width muP's attention scale (1/d_head, equal to 1/sqrt(d_head) at the base)
runs hotter than the standard model's and every hidden matrix gets a larger per-entry rate,
which is also where the coordinate check's wrong-base runs went over its bound
(docs/results/coordinate-check.md). A width outside the rule is not an error: the study
says so in one `warning:` line before it trains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cem_ablate.model.config import ModelConfig
    from cem_ablate.study.variants import ExpandedStudy

MIN_TRUSTED_HEAD_DIM = 16


@dataclass(frozen=True)
class UntrustedWidth:
    role: str  # "proxy", "target" or "ladder width"
    d_model: int
    d_head: int
    reasons: tuple[str, ...]

    def text(self) -> str:
        return f"{self.role} d_model {self.d_model} ({'; '.join(self.reasons)})"


def why_untrusted(model: ModelConfig) -> tuple[str, ...]:
    """The rule's reasons against one model config ((): trusted, or not under mup)."""
    dims = model.dims
    if dims.parametrization != "mup":
        return ()
    d_head = dims.d_model // dims.n_heads
    reasons = []
    if d_head < MIN_TRUSTED_HEAD_DIM:
        reasons.append(f"d_head {d_head} < {MIN_TRUSTED_HEAD_DIM}")
    if dims.d_model < dims.base_d_model:
        reasons.append(f"below base_d_model {dims.base_d_model}")
    return tuple(reasons)


def untrusted_widths(expanded: ExpandedStudy) -> list[UntrustedWidth]:
    """The widths of a transfer study (its proxies and the variants trained at their lr*, a
    forecast's ladder among them) outside the trusted range, each width and role once."""
    if expanded.spec.lr_search.method != "transfer":
        return []
    role = "ladder width" if expanded.spec.forecast is not None else "target"
    seen, out = set(), []
    for kind, variants in (("proxy", expanded.proxies), (role, expanded.variants)):
        for v in variants:
            reasons = why_untrusted(v.config.model)
            dims = v.config.model.dims
            if reasons and (kind, dims.d_model, reasons) not in seen:
                seen.add((kind, dims.d_model, reasons))
                out.append(UntrustedWidth(kind, dims.d_model, dims.d_model // dims.n_heads, reasons))
    return sorted(out, key=lambda u: (u.role != "proxy", u.d_model))


def trust_warning(expanded: ExpandedStudy) -> str | None:
    """One `warning:` line naming every untrusted width, or None."""
    widths = untrusted_widths(expanded)
    if not widths:
        return None
    return (
        f"warning: learning-rate transfer has been shown to hold for d_head >= {MIN_TRUSTED_HEAD_DIM} at or above "
        f"base_d_model (docs/results/forecast.md); outside that range: {', '.join(w.text() for w in widths)}: "
        "its lr* may depart from the proxy's, and a forecast's narrowest rung with it"
    )
