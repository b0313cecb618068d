"""The coordinate check's figure: one log-log panel per module, mean |activation| against
width, a line per Adam step (the check itself: `cem_ablate.training.coord_check`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from cem_ablate.training.coord_check import CoordCheckResult


def plot_coord_check(result: CoordCheckResult, path: str | Path, modules: Sequence[str] | None = None) -> None:
    """One log-log panel per module: mean |activation| against width, a line per Adam step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modules = list(modules or result.values)
    slopes, flagged = result.slopes(), result.flagged()
    cols = min(4, len(modules))
    rows = math.ceil(len(modules) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    widths = result.settings.widths
    cmap = plt.get_cmap("viridis")
    handles = []
    for ax, module in zip(axes.flat, modules):
        drawn, zero_steps = [], []
        for t in range(result.settings.steps):
            y = [result.values[module][w][t] for w in widths]
            if all(v > 0 for v in y):
                (line,) = ax.plot(
                    widths,
                    y,
                    marker="o",
                    ms=3,
                    color=cmap(t / max(1, result.settings.steps - 1)),
                    label=f"step {t + 1}",
                )
                drawn += y
                if ax is axes.flat[0]:
                    handles.append(line)
            elif all(v == 0 for v in y):
                zero_steps.append(t + 1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        if drawn:  # at least a factor 4 top to bottom, so a flat line looks flat (slope 1 would rise 8x)
            low, high = min(drawn), max(drawn)
            centre = math.sqrt(low * high)
            ax.set_ylim(min(low, centre / 2) / 1.1, max(high, centre * 2) * 1.1)
        if zero_steps:
            ax.text(
                0.02,
                0.93,
                f"exactly 0 at step {', '.join(map(str, zero_steps))}",
                transform=ax.transAxes,
                fontsize=6,
                color="dimgray",
            )
        ax.set_xticks(widths, [str(w) for w in widths])
        ax.minorticks_off()
        worst = max((abs(v) for v in slopes[module] if math.isfinite(v)), default=0.0)
        converges = module in flagged and result.converges(module)
        ax.set_title(
            f"{module}\nmax |slope| {worst:.2f}" + (f", converges (without d {min(widths)})" if converges else ""),
            fontsize=8,
            color="darkorange" if converges else "crimson" if module in flagged else "black",
        )
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(modules) :]:
        ax.axis("off")
    fig.supxlabel("d_model")
    fig.supylabel("mean |activation| (geometric mean over initializations)")
    fig.suptitle(
        f"coordinate check, parametrization: {result.parametrization} "
        f"(lr {result.settings.lr:g}, {result.settings.seeds} initializations; a line per Adam step, "
        f"step 1 = init)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 0.92, 1))
    if handles:
        fig.legend(handles=handles, loc="center right", fontsize=7, title="Adam step", title_fontsize=7)
    fig.savefig(path, dpi=110)
    if str(path).endswith(".png"):
        fig.savefig(str(path)[:-4] + ".svg")
    plt.close(fig)
