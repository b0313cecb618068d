"""The one decision rule: is a variant better or worse than its baseline?

Every report, the sequential seed rule, the dry run and the MLflow verdict tags call
`decide` (one comparison) and `adjust` (a report's comparisons as one family). The
objective is minimized, so Δ = variant − baseline < 0 means better.

- The test follows the design: `paired=True` (a paired t-test over the seeds both
  sides finished) only where pairing is real -- the two variants get identical initial
  values for every parameter they share, so the seed-to-seed noise cancels; otherwise
  Welch's t-test over every finite seed each side has.
- `Design.pooled` (`statistics.variance: pooled`): an unpaired Δ's standard error takes
  the seed-to-seed variance pooled over every point the family compares (each model at
  the learning rate it is tested at), the one-way ANOVA's within-group mean square, with
  Σ(n_i − 1) degrees of freedom (`pooled_t`). Valid where every point has the same seed
  variance -- a model property of one recipe that docs/results/pooled-variance.md checks;
  it buys the degrees of freedom two seeds per side cannot give Welch's test.
- The seed design (`Design`) says at how many seed counts a verdict is looked at and
  how many tests each look makes (`at: both` tests two grid points). Each look is
  tested at `look_alpha` = α / K, K = looks × tests per look (Bonferroni over the
  looks: the design's false-positive rate is at most α whatever the stopping rule,
  because the union of K events each of probability <= α/K has probability <= α).
  Equivalently the design-corrected p-value `p_design` = min(1, K·p) is compared with
  α; it is itself a valid p-value (P(K·p_stop <= u) <= Σ_looks P(K·p <= u) <= u), so a
  report may adjust it once more for its family (Holm).
  Why not a sharper (Pocock-type) constant threshold: one calibrated by simulation
  holds the false-positive rate at α only, while K·p is a valid p-value at every level
  -- which Holm over the report's family needs. At the study's stop-when-resolved rule
  the simulated false-positive rates stay under α (figures in
  docs/lab-notes/from-code-comments.md): Bonferroni costs some power there, never
  calibration.
- The interval of Δ is the t-interval at the design's level 1 − look_alpha: it
  excludes 0 exactly when p_design <= α, and covers the true Δ with probability
  >= 1 − α at whichever look the seeds stopped (same union bound).

The t statistics are computed here in numpy (`paired_t`, `welch_t`, vectorized over
leading axes) so that the power simulation (`analysis.power`) runs the very same
rule on thousands of simulated studies at once; the unit tests check them against
scipy.stats.ttest_rel / ttest_ind(equal_var=False) to 1e-12.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypedDict

import numpy as np
import numpy.typing as npt
from scipy import stats

BETTER, WORSE, UNRESOLVED = "better", "worse", "unresolved"
PAIRED_T, WELCH_T, POOLED_T = "paired t", "Welch t", "pooled t"
ALPHA = 0.05


@dataclass(frozen=True)
class Design:
    """How the seeds were (or will be) chosen: the seed counts at which a verdict is
    looked at, and how many tests each look makes."""

    looks: tuple[int, ...]  # fixed seeds: (n,); sequential {min 2, max 5}: (2, 3, 4, 5)
    tests_per_look: int = 1  # 2 for sequential `at: both` (two grid points tested per look)
    alpha: float = ALPHA
    pooled: bool = False  # unpaired Δs use the seed variance pooled over the family's points (`pooled_t`)

    def __post_init__(self) -> None:
        # Programming errors, not user input: the study file and the CLI validate theirs first.
        if not self.looks or any(n < 1 for n in self.looks) or list(self.looks) != sorted(set(self.looks)):
            raise ValueError(f"looks must be increasing seed counts >= 1, got {self.looks}")
        if self.tests_per_look < 1 or not 0.0 < self.alpha < 1.0:
            raise ValueError(f"tests_per_look >= 1 and 0 < alpha < 1, got {self.tests_per_look}, {self.alpha}")

    @classmethod
    def fixed(cls, n: int, alpha: float = ALPHA, pooled: bool = False) -> Design:
        return cls((int(n),), 1, float(alpha), bool(pooled))

    @classmethod
    def sequential(cls, min: int, max: int, at: str = "baseline", alpha: float = ALPHA, pooled: bool = False) -> Design:
        """`seeds: {min, max, until: resolved, at}`: a look after every added seed. A look
        with fewer than 2 seeds tests nothing (no spread to judge by) and spends no α."""
        if at not in ("baseline", "own", "both"):
            raise ValueError(f"at must be baseline, own or both, got {at!r}")
        if int(max) < int(min):
            raise ValueError(f"max must be at least min, got min {min}, max {max}")
        looks = tuple(range(builtin_max(int(min), 2), int(max) + 1))
        return cls(looks or (int(max),), 2 if at == "both" else 1, float(alpha), bool(pooled))

    @property
    def testing_looks(self) -> tuple[int, ...]:
        """The looks that can test (>= 2 seeds)."""
        return tuple(n for n in self.looks if n >= 2)

    @property
    def n_tests(self) -> int:
        """K: the tests the design may make, over which α is spent (at least 1)."""
        return builtin_max(1, len(self.testing_looks) * self.tests_per_look)

    @property
    def sequential_looks(self) -> bool:
        return len(self.looks) > 1

    def look_alpha(self) -> float:
        """Per-look, per-test threshold on the raw p: the design's false-positive rate is
        then <= alpha (Bonferroni over the K tests, see the module docstring)."""
        return self.alpha / self.n_tests

    def describe(self) -> str:
        pooled = "; unpaired Δs with the seed variance pooled over the compared points" if self.pooled else ""
        return self._describe_looks() + pooled

    def _describe_looks(self) -> str:
        if self.sequential_looks:
            at = ", 2 grid points per look (at: both)" if self.tests_per_look == 2 else ""
            return (
                f"sequential seeds {self.looks[0]}..{self.looks[-1]} (a look after every seed{at}); "
                f"each look tested at p <= {self.look_alpha():.4g} (α = {self.alpha:g} over {self.n_tests} tests)"
            )
        n = self.looks[0]
        return f"{n} seed{'s' if n != 1 else ''}, one look, tested at p <= {self.look_alpha():.4g} (α = {self.alpha:g})"


builtin_max = max  # `Design.sequential` has parameters named min/max (the study file's keys)


@dataclass(frozen=True)
class Decision:
    """One comparison's Δ, interval, p-values and verdict."""

    delta: float | None  # Δ = mean(variant) − mean(baseline) (paired: mean of differences)
    low: float | None  # t-interval of Δ at the design's level 1 − look_alpha
    high: float | None
    p: float | None  # raw two-sided p of the test
    p_design: float | None  # p corrected for the design's looks and tests: min(1, K·p)
    test: str  # PAIRED_T | WELCH_T | POOLED_T
    n_variant: int
    n_baseline: int
    n_pairs: int
    p_holm: float | None = None  # filled by `adjust`
    verdict: str = UNRESOLVED  # better | worse | unresolved
    std: float | None = None  # paired: std of the differences; Welch: the two sides' rms std; pooled: the pooled std
    level: float | None = None  # the interval's confidence level, 1 − look_alpha

    @property
    def resolved(self) -> bool:
        return self.verdict != UNRESOLVED

    @property
    def p_final(self) -> float | None:
        """The p the verdict uses: Holm-adjusted where `adjust` ran, else the design's."""
        return self.p_holm if self.p_holm is not None else self.p_design

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> Decision:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class TStat(NamedTuple):
    """A t-test's pieces, arrays over the leading axes of the samples."""

    delta: np.ndarray  # mean difference
    se: np.ndarray  # its standard error
    df: np.ndarray  # degrees of freedom
    p: np.ndarray  # two-sided p


def _two_sided(delta: np.ndarray, se: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided p of t = delta/se; se = 0 (identical values) gives p = 0 for delta != 0
    and 1 for delta = 0 (scipy gives NaN; the data are then unambiguous)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(delta) / se
        p = 2.0 * stats.t.sf(t, df)
    return np.where(se > 0, p, np.where(delta != 0, 0.0, 1.0))


def paired_t(diffs: np.ndarray) -> TStat:
    """One-sample t-test of the paired differences, over the last axis (n >= 2)."""
    d = np.asarray(diffs, dtype=np.float64)
    n = d.shape[-1]
    delta = d.mean(axis=-1)
    se = d.std(axis=-1, ddof=1) / math.sqrt(n)
    df = np.full_like(delta, n - 1.0)
    return TStat(delta, se, df, _two_sided(delta, se, df))


def welch_t(x: np.ndarray, y: np.ndarray) -> TStat:
    """Welch's t-test of mean(x) − mean(y), over the last axes (>= 2 values each);
    Welch–Satterthwaite degrees of freedom, as scipy's ttest_ind(equal_var=False)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    nx, ny = x.shape[-1], y.shape[-1]
    vx, vy = x.var(axis=-1, ddof=1) / nx, y.var(axis=-1, ddof=1) / ny
    delta = x.mean(axis=-1) - y.mean(axis=-1)
    se2 = vx + vy
    with np.errstate(divide="ignore", invalid="ignore"):
        df = se2**2 / (vx**2 / (nx - 1) + vy**2 / (ny - 1))
    df = np.where(se2 > 0, df, nx + ny - 2.0)
    se = np.sqrt(se2)
    return TStat(delta, se, df, _two_sided(delta, se, df))


def pooled_t(
    delta: npt.ArrayLike, n_x: npt.ArrayLike, n_y: npt.ArrayLike, variance: npt.ArrayLike, df: npt.ArrayLike
) -> TStat:
    """t-test of a difference of means `delta` (n_x and n_y values) whose seed variance is
    `variance`, pooled over groups with `df` = Σ(n_i − 1) degrees of freedom (`pool`). With the
    two sides as the only groups this is Student's two-sample t, scipy's ttest_ind(equal_var=True)."""
    d = np.asarray(delta, dtype=np.float64)
    se = np.sqrt(np.asarray(variance, dtype=np.float64) * (1.0 / np.asarray(n_x) + 1.0 / np.asarray(n_y)))
    dof = np.broadcast_to(np.asarray(df, dtype=np.float64), d.shape)
    return TStat(d, se, dof, _two_sided(d, se, dof))


class PooledVariance(NamedTuple):
    """The within-group seed variance of several groups (one-way ANOVA's mean square)."""

    variance: float
    df: int  # Σ(n_i − 1)


def pool(groups: Sequence[Sequence[float]]) -> PooledVariance | None:
    """Σ_i Σ_s (x_is − mean_i)² / Σ_i (n_i − 1) over the groups' finite values; None when no
    group has two values (nothing to estimate a spread from)."""
    ss, df = 0.0, 0
    for group in groups:
        x = np.asarray([v for v in group if v is not None and math.isfinite(float(v))], dtype=np.float64)
        if len(x) >= 2:
            ss += float(((x - x.mean()) ** 2).sum())
            df += len(x) - 1
    return PooledVariance(ss / df, df) if df else None


def design_p(p, design: Design):
    """The design-corrected p: min(1, K·p) (Bonferroni over the design's K tests)."""
    return np.minimum(1.0, np.asarray(p, dtype=np.float64) * design.n_tests)


def rejects(p_design, alpha: float):
    """THE threshold: a verdict is declared iff the (design- or Holm-) corrected p <= α."""
    return np.asarray(p_design) <= alpha


def _finite(values: Mapping[int, float]) -> dict[int, float]:
    return {int(s): float(v) for s, v in values.items() if v is not None and math.isfinite(float(v))}


def _verdict(delta: float | None, p_corrected: float | None, alpha: float) -> str:
    if delta is None or p_corrected is None or not bool(rejects(p_corrected, alpha)) or delta == 0.0:
        return UNRESOLVED
    return BETTER if delta < 0 else WORSE


class _Counts(TypedDict):
    """The fields every `Decision` of one comparison shares, tested or not."""

    test: str
    n_variant: int
    n_baseline: int
    n_pairs: int


def decide(
    variant: Mapping[int, float],
    baseline: Mapping[int, float],
    *,
    paired: bool,
    design: Design,
    pooled: PooledVariance | None = None,
) -> Decision:
    """Δ, interval, p and verdict of variant vs baseline; values keyed by seed.

    Paired: over the seeds both have (n_pairs); unpaired: every seed each side has, by
    Welch's test, or by `pooled_t` with `pooled` (the family's pooled variance) where
    `design.pooled` (then one seed per side suffices: the spread comes from the pool).
    Non-finite values (diverged trials) are dropped. Fewer than 2 per side (paired: 2
    pairs) -> no test: Δ where defined, every other field None, unresolved.
    """
    v, b = _finite(variant), _finite(baseline)
    shared = sorted(set(v) & set(b))
    use_pool = design.pooled and not paired and pooled is not None
    test = PAIRED_T if paired else POOLED_T if use_pool else WELCH_T
    base: _Counts = {"test": test, "n_variant": len(v), "n_baseline": len(b), "n_pairs": len(shared)}
    if paired:
        if not shared:
            return Decision(None, None, None, None, None, **base)
        diffs = np.asarray([v[s] - b[s] for s in shared], dtype=np.float64)
        if len(shared) < 2:
            return Decision(float(diffs.mean()), None, None, None, None, **base)
        result = paired_t(diffs)
        std = float(np.std(diffs, ddof=1))
    else:
        if not v or not b:
            return Decision(None, None, None, None, None, **base)
        xv = np.asarray(list(v.values()), dtype=np.float64)
        xb = np.asarray(list(b.values()), dtype=np.float64)
        if use_pool:
            assert pooled is not None  # use_pool requires a pool
            result = pooled_t(xv.mean() - xb.mean(), len(xv), len(xb), pooled.variance, pooled.df)
            std = math.sqrt(pooled.variance)
        elif len(xv) < 2 or len(xb) < 2:
            return Decision(float(xv.mean() - xb.mean()), None, None, None, None, **base)
        else:
            result = welch_t(xv, xb)
            std = float(math.sqrt((np.var(xv, ddof=1) + np.var(xb, ddof=1)) / 2.0))
    delta, se, df, p = (float(a) for a in result)
    level = 1.0 - design.look_alpha()
    half = float(stats.t.ppf(0.5 + level / 2.0, df)) * se if se > 0 else 0.0
    p_d = float(design_p(p, design))
    return Decision(
        delta,
        delta - half,
        delta + half,
        p,
        p_d,
        verdict=_verdict(delta, p_d, design.alpha),
        std=std,
        level=level,
        **base,
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), hand-written: scipy.stats has no
    Holm correction (only false_discovery_control, which is Benjamini–Hochberg).
    Sorted ascending, p_(i) is multiplied by (m − i), made monotone, capped at 1."""
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = stepped
    return [float(x) for x in out]


def adjust(
    decisions: Sequence[Decision], *, alpha: float = ALPHA, correction: Literal["holm", "none"] = "holm"
) -> list[Decision]:
    """A report's comparisons as one family: Holm over their `p_design` (comparisons
    without a test stay as they are, unresolved); the verdict is better/worse iff the
    adjusted p <= alpha. `correction="none"` keeps p_design (p_holm = p_design)."""
    if correction not in ("holm", "none"):
        raise ValueError(f"correction must be 'holm' or 'none', got {correction!r}")
    tested = [i for i, d in enumerate(decisions) if d.p_design is not None]
    ps = [p for d in decisions if (p := d.p_design) is not None]  # the p_design of `tested`, in order
    adjusted = dict(zip(tested, holm(ps) if correction == "holm" else ps))
    out = []
    for i, d in enumerate(decisions):
        if i not in adjusted:
            out.append(dataclasses.replace(d, p_holm=None, verdict=UNRESOLVED))
            continue
        out.append(dataclasses.replace(d, p_holm=adjusted[i], verdict=_verdict(d.delta, adjusted[i], alpha)))
    return out
