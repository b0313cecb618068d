"""The generated blocks of docs/results/: every table and every sentence with a number that a
block holds is computed here from the committed data (trial CSVs under docs/figures/, the claims
table docs/results/claims.csv), never typed by hand.

A page marks a block as

    <!-- generated: NAME (python scripts/results_pages.py) -->
    ...
    <!-- end generated: NAME -->

and this script rewrites what lies between the marks with BLOCKS[NAME](root). A test
(tests/scripts/test_results_pages.py) regenerates every block and fails on any difference, so
an edited data file, or an edited page, shows up until the page is regenerated.

    python scripts/results_pages.py            # rewrite the blocks in place
    python scripts/results_pages.py --check    # exit 1 with a diff when a page is stale
"""

from __future__ import annotations

import argparse
import difflib
import functools
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = "docs/results"
sys.path.insert(0, str(Path(__file__).resolve().parent))

BLOCK = re.compile(r"(?P<open><!-- generated: (?P<name>[\w/.-]+) \(python scripts/results_pages\.py\) -->\n)"
                   r"(?P<body>.*?)"
                   r"(?P<close><!-- end generated: (?P=name) -->)", re.S)

BLOCKS: dict[str, Callable[[Path], str]] = {}
EVIDENCE: list = []  # the per-page computations, cached for one pass over the pages


def evidence(fn):
    cached = functools.lru_cache(maxsize=None)(fn)
    EVIDENCE.append(cached)
    return cached


def block(name: str):
    def register(fn):
        BLOCKS[name] = fn
        return fn
    return register


def link(root: Path, page_dir: str, path: str) -> str:
    """A Markdown link from a results page to a data file, checked to exist."""
    if not (root / path).exists():
        raise FileNotFoundError(f"error: data file {path} named by a results page does not exist")
    rel = Path("..") / Path(path).relative_to("docs") if path.startswith("docs/") else None
    if rel is None:  # outside the site: the repository copy
        return f"`{path}`"
    return f"[`{Path(path).name}`]({rel.as_posix()})"


# ---------------------------------------------------------------------------------------------
# pooled-variance.md: scripts/pooled_variance_evidence.py on docs/figures/cpu_*_trials.csv

@evidence
def pooled(root: Path) -> dict:
    import numpy as np
    from scipy import stats

    import pooled_variance_evidence as ev

    d = ev.finished_trials(root)
    models = ev.models_at_best_lr(d)
    groups = [m.values for m in models]
    stds = np.array([np.std(g, ddof=1) for g in groups])
    tau2, upper = ev.tau_squared(groups)
    rng = np.random.default_rng(1)
    sims = []
    for k in (6, 8, 12, 16, 20, 24):
        for t2 in (0.0, upper):
            fp, fp_ref = ev.simulate(k, t2, 0.0, rng)
            pw, pw_ref = ev.simulate(k, t2, ev.DELTA, rng)
            sims.append((k, t2, fp, fp_ref, pw, pw_ref))
    rows = ev.proxy_seed_rows(d)
    log_var = np.log(stds ** 2)
    return {
        "csvs": sorted(p.relative_to(root).as_posix() for p in root.glob(ev.CSVS)),
        "models": models, "stds": stds, "tau2": tau2, "upper": upper,
        "bartlett": stats.bartlett(*groups).pvalue, "bartlett_log": stats.bartlett(*[np.log(g) for g in groups]).pvalue,
        "levene": stats.levene(*groups).pvalue, "levene_log": stats.levene(*[np.log(g) for g in groups]).pvalue,
        "log_var_var": float(np.var(log_var, ddof=1)), "ratio": float(stds.max() ** 2 / stds.min() ** 2),
        "copies": sum(len(m.studies) - 1 for m in models),
        "recipes": sorted({m.identity[0] for m in models}), "widths": sorted({m.identity[3] for m in models}),
        "families": sorted({m.identity[2] for m in models}),
        "sims": sims, "proxy": rows, "reps": ev.REPS, "alpha": ev.POOLED_ALPHA, "delta": ev.DELTA,
    }


@block("pooled-variance/data")
def pooled_data(root: Path) -> str:
    e = pooled(root)
    links = ", ".join(link(root, PAGES, p) for p in e["csvs"])
    return (f"Data: the committed trial tables {links} (every number on this page is computed from "
            "them by the command above).\n")


@block("pooled-variance/short")
def pooled_short(root: Path) -> str:
    e = pooled(root)
    sims = e["sims"]
    at0 = [s for s in sims if s[1] == 0.0 and s[0] >= 8]
    up = [s for s in sims if s[1] > 0.0]
    return (f"**In short:** on {len(e['models'])} distinct CPU models ({len(e['families'])} families, widths "
            f"d {e['widths'][0]}–{e['widths'][-1]}, {len(e['recipes'])} recipes) the spread of the sample "
            f"variances is no larger than sampling alone gives (Levene p = {e['levene']:.2f}, Bartlett "
            f"p = {e['bartlett']:.3f}; the moments estimate of the spread of the true log-variances is "
            f"{max(e['tau2'], 0.0):.0f}, its one-sided 90% upper bound {e['upper']:.2f}). With every variance "
            f"equal, in {e['reps']:,} simulated comparisons per design, 2 seeds pooled over 8 or more models at "
            f"α {e['alpha']} have a false-positive rate of {min(s[2] for s in at0):.3f}–{max(s[2] for s in at0):.3f} "
            f"against 3 fixed Welch seeds' {min(s[3] for s in at0):.3f}–{max(s[3] for s in at0):.3f}, and power "
            f"{min(s[4] for s in at0):.2f}–{max(s[4] for s in at0):.2f} against "
            f"{min(s[5] for s in at0):.2f}–{max(s[5] for s in at0):.2f} at Δ = {e['delta']} seed stds. At the "
            f"upper bound of the spread, the pooled design's false-positive rate is "
            f"{min(s[2] for s in up):.3f}–{max(s[2] for s in up):.3f} (Welch's {min(s[3] for s in up):.3f}–"
            f"{max(s[3] for s in up):.3f}). A proxy tuned with 2 seeds instead of 3 lands within "
            f"{e['proxy'].ratio.quantile(0.9):.2f}× of the 3-seed lr* in 90% of cases, at a median cost of "
            f"{e['proxy'].cost.median():.3f} seed stds.\n")


@block("pooled-variance/models")
def pooled_models(root: Path) -> str:
    import numpy as np
    from scipy import special

    e = pooled(root)
    s = e["stds"]
    recipes = "; ".join(f"{r}: {sum(m.identity[0] == r for m in e['models'])}" for r in e["recipes"])
    return (
        "| | value |\n|---|---|\n"
        f"| models (each once: one model stored by several studies, or retrained under a new trial key, "
        f"counts once) | {len(e['models'])} ({e['copies']} further copies left out) |\n"
        f"| recipes (models each) | {recipes} |\n"
        f"| seed std (perplexity) | median {float(np.median(s)):.3f}, range "
        f"{s.min():.3f}–{s.max():.3f} |\n"
        f"| Bartlett (equal variances; assumes normal values) | p = {e['bartlett']:.3f} on perplexity, "
        f"{e['bartlett_log']:.3f} on log perplexity |\n"
        f"| Levene, median-centred (robust to tails) | p = {e['levene']:.3f} on perplexity, "
        f"{e['levene_log']:.3f} on log perplexity |\n"
        f"| τ², the variance of the true log σ² across models, by moments | {e['tau2']:.3f}"
        f"{' (none beyond sampling)' if e['tau2'] <= 0 else ''} |\n"
        f"| τ², one-sided 90% upper bound (by simulation) | {e['upper']:.2f} (a model's σ "
        f"{math.exp(math.sqrt(e['upper']) / 2):.2f}× the typical one at 1 sd) |\n\n"
        f"The observed sample variances differ by a factor {e['ratio']:.0f} from smallest to largest, but "
        f"three seeds give each only 2 degrees of freedom, and the log of a χ²₂ variance alone has a "
        f"variance of {float(special.polygamma(1, 1.0)):.2f}: the {len(e['models'])} log-variances scatter "
        f"{'less' if e['log_var_var'] < special.polygamma(1, 1.0) else 'more'} "
        f"than that ({e['log_var_var']:.2f}), so the moments estimate of τ² is "
        f"{'negative' if e['tau2'] < 0 else 'positive'}.\n")


@block("pooled-variance/simulation")
def pooled_simulation(root: Path) -> str:
    e = pooled(root)
    lines = ["| points pooled | τ² | false-positive rate: pooled 2, Welch 3 | power at Δ = "
             f"{e['delta']} std: pooled 2, Welch 3 |", "|---|---|---|---|"]
    lines += [f"| {k} | {t2:.2f} | {fp:.3f}, {fpr:.3f} | {pw:.3f}, {pwr:.3f} |" for k, t2, fp, fpr, pw, pwr in e["sims"]]
    return "\n".join(lines) + "\n"


@block("pooled-variance/proxy")
def pooled_proxy(root: Path) -> str:
    rows = pooled(root)["proxy"]
    out = [f"With 2 proxy seeds instead of 3, on every distinct CPU model with at least 4 rates and 3 seeds "
           f"({len(rows)} seed pairs of {rows.model.nunique()} models):", "",
           "| | median | 90th percentile | max |", "|---|---|---|---|"]
    for col, what in (("ratio", "2-seed lr* / 3-seed lr* (either way)"),
                      ("cost", "the 2-seed lr*'s cost on the 3-seed curve, in seed stds")):
        out.append(f"| {what} | {rows[col].median():.3g} | {rows[col].quantile(0.9):.3g} | {rows[col].max():.3g} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------

def render(text: str, root: Path) -> str:
    unknown = [m.group("name") for m in BLOCK.finditer(text) if m.group("name") not in BLOCKS]
    if unknown:
        raise KeyError(f"error: generated block {unknown[0]} has no generator in scripts/results_pages.py")
    return BLOCK.sub(lambda m: m.group("open") + BLOCKS[m.group("name")](root) + m.group("close"), text)


def stale(root: Path = ROOT, pages: str = "*.md") -> dict[Path, tuple[str, str]]:
    """Every results page (matching `pages`) whose generated blocks differ from a fresh run:
    path -> (on disk, fresh)."""
    for cached in EVIDENCE:
        cached.cache_clear()  # a data file may have changed since the last pass
    out = {}
    for page in sorted((root / PAGES).glob(pages)):
        text = page.read_text(encoding="utf-8")
        fresh = render(text, root)
        if fresh != text:
            out[page] = (text, fresh)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff when a page is stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this script's)")
    parser.add_argument("--pages", default="*.md", help="only the results pages matching this glob")
    args = parser.parse_args(argv)
    changed = stale(args.root.resolve(), args.pages)
    for page, (old, new) in changed.items():
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       str(page), f"{page} (regenerated)"))
        else:
            page.write_text(new, encoding="utf-8")
            print(f"rewrote {page.relative_to(args.root.resolve())}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
