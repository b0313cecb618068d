"""Scaling summary for studies with a size axis (paper Fig. 2: perplexity vs parameters).

A family is one variant name across sizes ("llama" at 86M, 108M, ...; "cem_attention"
at the same sizes). Per family and per axis (parameters; training FLOPs = forward +
backward FLOPs/token x tokens, `study.estimates`), the optimal objective (Akima objective*,
`analysis.statistics`) is fitted with a power law:

- saturating `L = a * (x/x0)^(-b) + c` (scipy.optimize.curve_fit) with >= 4 sizes:
  three parameters need at least one residual degree of freedom;
- log-log linear `L = a * (x/x0)^(-b)` (a least-squares line in log-log)
  with 2-3 sizes, or when the saturating fit does not converge or lands outside
  a > 0, b > 0, 0 <= c < min L: with so few points c is not identifiable;
- none with a single size.

x0 is the family's smallest x (conditioning: parameters and FLOPs are ~1e8 and ~1e16).

Equivalence of a variant V (x_V, objective L_V) against its baseline family B:
x_eq = B's law inverted at L_V, the size at which B would reach V's objective;
multiplier = x_V / x_eq. "matches llama at 0.85x the parameters" means V reaches the
objective llama would reach with x_V / 0.85 parameters (< 1: V is more efficient).
An x_eq outside B's sampled range is an extrapolation and flagged. The report gives
the multiplier without an interval (`N_RESAMPLES`: its percentile bootstrap under-
covers at 3 seeds); `n_resamples > 0` computes one: each variant's seeds resampled
independently (scipy.stats.bootstrap with one sample per variant), refitting Akima
optima and laws per resample.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from cem_ablate.analysis.statistics import LEVEL, Interval, VariantStats, fit_for_seeds

PARAMS, FLOPS = "parameters", "training FLOPs"
SATURATING, LOG_LOG = "a*(x/x0)^-b + c", "a*(x/x0)^-b (log-log linear)"
MIN_SATURATING_POINTS = 4
# No multiplier intervals by default: an interval is printed only where its coverage
# has been checked, and this percentile bootstrap covered the true multiplier in clearly
# fewer simulated 4-size studies of 3 seeds each than the 95% it printed (figures in
# docs/lab-notes/from-code-comments.md). n_resamples > 0 still computes it (each
# resample refits every law with curve_fit).
N_RESAMPLES = 0
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class ScalingInput:
    name: str  # variant name, e.g. "cem_attention,size=86M"
    family: str  # e.g. "cem_attention"
    baseline_family: str | None
    params: float
    train_flops: float
    stats: VariantStats
    method: str = "akima"


@dataclass(frozen=True)
class PowerLaw:
    form: str  # SATURATING or LOG_LOG
    a: float
    b: float
    c: float  # 0 for LOG_LOG
    x0: float
    x_range: tuple[float, float]
    why: str

    def __call__(self, x: float) -> float:
        return self.a * (x / self.x0) ** (-self.b) + self.c

    def inverse(self, objective: float) -> float | None:
        """The x at which the law reaches `objective`; None if it never does."""
        if not (self.b > 0 and self.a > 0 and objective > self.c):
            return None
        return self.x0 * ((objective - self.c) / self.a) ** (-1.0 / self.b)


@dataclass(frozen=True)
class Equivalence:
    variant: str
    baseline_family: str
    axis: str  # PARAMS or FLOPS
    x: float  # the variant's own parameters / FLOPs
    x_equivalent: float | None  # what the baseline family needs for the same objective
    interval: Interval | None  # of the multiplier

    @property
    def multiplier(self) -> float | None:
        return self.x / self.x_equivalent if self.x_equivalent else None


@dataclass(frozen=True)
class ScalingSummary:
    points: dict[str, list[ScalingInput]]  # family -> its variants, by size
    laws: dict[tuple[str, str], PowerLaw]  # (family, axis) -> law
    equivalences: list[Equivalence] = field(default_factory=list)

    def extrapolated(self, eq: Equivalence) -> bool:
        law = self.laws.get((eq.baseline_family, eq.axis))
        return (
            law is not None and eq.x_equivalent is not None and not law.x_range[0] <= eq.x_equivalent <= law.x_range[1]
        )


def has_size_axis(inputs: list[ScalingInput]) -> bool:
    """Some family holds variants of different parameter counts."""
    sizes: dict[str, set[float]] = {}
    for i in inputs:
        sizes.setdefault(i.family, set()).add(i.params)
    return any(len(s) > 1 for s in sizes.values())


def fit_power_law(xs: list[float], ys: list[float]) -> PowerLaw | None:
    """Saturating law with >= 4 sizes, else (or if it fails) log-log linear; None for < 2."""
    from scipy.optimize import OptimizeWarning, curve_fit

    pairs = sorted((float(x), float(y)) for x, y in zip(xs, ys) if x > 0 and y > 0 and math.isfinite(y))
    if len({x for x, _ in pairs}) < 2:
        return None
    x = np.asarray([p[0] for p in pairs], dtype=np.float64)
    y = np.asarray([p[1] for p in pairs], dtype=np.float64)
    x0 = float(x[0])
    slope, intercept = np.polyfit(np.log(x / x0), np.log(y), 1)  # least squares line in log-log
    loglog = PowerLaw(
        LOG_LOG,
        float(math.exp(intercept)),
        float(-slope),
        0.0,
        x0,
        (float(x[0]), float(x[-1])),
        f"{len(x)} sizes: too few for the 3-parameter law"
        if len(x) < MIN_SATURATING_POINTS
        else "no saturating fit with a, b > 0 and 0 <= c < min objective",
    )
    if len(x) < MIN_SATURATING_POINTS:
        return loglog

    def law(xx, a, b, c):
        return a * (xx / x0) ** (-b) + c

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", OptimizeWarning)
            c_start = 0.5 * float(y.min())
            p0 = (max(float(y[0]) - c_start, 1e-9), max(float(-slope), 0.05), c_start)
            # Unbounded Levenberg-Marquardt (several times faster than the bounded solver, and the
            # bootstrap refits it ~1000 times); a law outside a > 0, b > 0, 0 <= c < min L
            # is rejected below instead.
            (a, b, c), _ = curve_fit(law, x, y, p0=p0, maxfev=2000)
    except (RuntimeError, ValueError, OptimizeWarning):
        return loglog
    if not (a > 0 and b > 0 and 0 <= c < float(y.min())):
        return loglog
    return PowerLaw(
        SATURATING,
        float(a),
        float(b),
        float(c),
        x0,
        (float(x[0]), float(x[-1])),
        f"{len(x)} sizes: enough for a, b and the irreducible term c",
    )


def _x(i: ScalingInput, axis: str) -> float:
    return i.params if axis == PARAMS else i.train_flops


def _laws(inputs: list[ScalingInput], objective: dict[int, float | None]) -> dict[tuple[str, str], PowerLaw]:
    families: dict[str, list[ScalingInput]] = {}
    for i in inputs:
        families.setdefault(i.family, []).append(i)
    out = {}
    for family, members in families.items():
        for axis in (PARAMS, FLOPS):
            pts = [(_x(m, axis), y) for m in members if (y := objective.get(id(m))) is not None]
            law = fit_power_law([p[0] for p in pts], [p[1] for p in pts])
            if law is not None:
                out[(family, axis)] = law
    return out


def _x_equivalents(inputs, laws, objective) -> list[float | None]:
    """Per (variant with a baseline family, axis): the baseline family's x at its objective."""
    out = []
    for i in inputs:
        if i.baseline_family is None:
            continue
        for axis in (PARAMS, FLOPS):
            law = laws.get((i.baseline_family, axis))
            value = objective.get(id(i))
            out.append(law.inverse(value) if law is not None and value is not None else None)
    return out


def summarize_scaling(
    inputs: list[ScalingInput], n_resamples: int = N_RESAMPLES, rng_seed: int = BOOTSTRAP_SEED
) -> ScalingSummary:
    # Keyed by the input itself, not its name: two sizes of one baseline can share a name
    # (a study whose variants set d_model gets one `llama` per width), and a name key gave
    # all of them the last one's objective: a flat law, printed as if it were measured.
    objective = {id(i): (i.stats.optimum.objective_star if i.stats.optimum else None) for i in inputs}
    laws = _laws(inputs, objective)
    compared = [i for i in inputs if i.baseline_family is not None]
    x_eqs = _x_equivalents(inputs, laws, objective)
    intervals: list[Interval | None] = [None] * len(x_eqs)
    usable = [i for i in inputs if i.stats.optimum is not None]
    if n_resamples > 0 and compared and usable and all(i.stats.n_seeds >= 2 for i in usable):
        intervals = _bootstrap_multipliers(usable, compared, n_resamples, rng_seed)
    equivalences = []
    k = 0
    for i in compared:
        assert i.baseline_family is not None  # `compared` keeps the inputs with a baseline family
        for axis in (PARAMS, FLOPS):
            equivalences.append(Equivalence(i.name, i.baseline_family, axis, _x(i, axis), x_eqs[k], intervals[k]))
            k += 1
    families: dict[str, list[ScalingInput]] = {}
    for i in inputs:
        families.setdefault(i.family, []).append(i)
    for members in families.values():
        members.sort(key=lambda m: m.params)
    return ScalingSummary(families, laws, equivalences)


def _bootstrap_multipliers(usable, compared, n_resamples, rng_seed) -> list[Interval | None]:
    from scipy.stats import bootstrap

    seeds = [i.stats.seeds for i in usable]
    caches: list[dict] = [{} for _ in usable]
    # The multiplier x_V / x_eq(L_V): `compared` order x (PARAMS, FLOPS), as in summarize_scaling.
    xs = np.asarray([_x(i, axis) for i in compared for axis in (PARAMS, FLOPS)], dtype=np.float64)

    def statistic(*positions) -> np.ndarray:
        objective = {}
        for k, (i, pos) in enumerate(zip(usable, positions)):
            key = tuple(sorted(int(p) for p in pos))
            if key not in caches[k]:
                fit = fit_for_seeds(i.stats.by_lr, (seeds[k][p] for p in key), i.method)
                caches[k][key] = fit.ppl_star if fit is not None else None
            objective[id(i)] = caches[k][key]
        laws = _laws(usable, objective)
        eqs = _x_equivalents(compared, laws, objective)
        return np.asarray([math.nan if e is None else x / e for x, e in zip(xs, eqs)], dtype=np.float64)

    data = tuple(np.arange(len(s)) for s in seeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resamples whose law cannot be inverted give NaN
        result = bootstrap(
            data,
            statistic,
            n_resamples=n_resamples,
            vectorized=False,
            paired=False,
            confidence_level=LEVEL,
            method="percentile",
            rng=np.random.default_rng(rng_seed),
        )
    # Percentiles of the bootstrap distribution, ignoring resamples whose law cannot be
    # inverted (NaN: a family whose objective does not fall with size) as long as they
    # are under 5%: more, and the multiplier is not identified at this spread (None).
    dist = np.atleast_2d(result.bootstrap_distribution)
    out: list[Interval | None] = []
    for row in dist:
        if np.mean(np.isnan(row)) >= 1.0 - LEVEL:
            out.append(None)
            continue
        lo, hi = np.nanpercentile(row, [50.0 * (1.0 - LEVEL), 50.0 * (1.0 + LEVEL)])
        out.append(Interval(float(lo), float(hi), LEVEL, "percentile bootstrap"))
    return out
