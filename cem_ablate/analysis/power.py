"""Power before compute: what a seed design can detect, and how often it errs.

All effects are in units of the seed-to-seed standard deviation: paired, the std of
the per-seed differences variant − baseline; Welch, the std of each side's values
(equal on both sides). A seed at paper scale is tens of GPU-hours: this is where a
user decides how many to buy (`cem-ablate power`, the dry run).

- A fixed one-look, one-test paired design has an exact answer: the power of a
  two-sided one-sample t-test is that of the noncentral t, scipy.stats.nct, with
  n − 1 degrees of freedom and noncentrality Δ/σ·√n (`exact_power`).
- Welch's test has no exact power: its degrees of freedom are estimated from the
  data (between n − 1 and 2n − 2 at equal n). The noncentral t with 2n − 2 df (Welch's
  df at equal variances) overstates it -- by 0.03 at 5 seeds and Δ = 1.5σ -- so Welch
  designs are simulated like sequential ones.
- A pooled design (`Design.pooled`) estimates the seed variance from `groups` points of n
  seeds each (the comparison's two sides and the report's other points, all at the same
  variance): fixed, one test, its power is the noncentral t's with groups·(n − 1) df
  (`exact_power`); sequential, the other groups are simulated beside the two sides.
- Sequential or multi-test designs are simulated through the decision rule itself
  (`decision.paired_t` / `decision.welch_t`, `decision.design_p`, `decision.rejects`,
  the functions `decide` uses), vectorized over all simulated studies with numpy and
  a seeded generator, so the numbers are deterministic. The simulated seeds follow
  the study's rule (`study.sequential`) for one pair: after each look, the seeds stop
  once every tested Δ is resolved; the verdict is the one at the last look taken. In a
  study of several tests (pairs, or `at: both`'s two grid points) the rule waits for
  the Holm-adjusted verdict, which buys seeds where Holm holds a pair back
  (family-wise rates: tests/study/test_seeds.py).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, stats

from cem_ablate.analysis.decision import Design, design_p, paired_t, pooled_t, rejects, welch_t

REPS = 20_000
RNG_SEED = 0
RHO = 0.5  # correlation of the two grid points' Δs under `at: both` (neighbouring learning rates)
POWER = 0.8


@functools.lru_cache(maxsize=8)
def _draws(reps: int, tests: int, n_max: int, seed: int, rho: float, paired: bool) -> tuple[np.ndarray, ...]:
    """Standard normal seeds of the simulated comparisons, (reps, tests, n_max) per side
    (paired: the differences, one side), the tests of one seed correlated `rho`. Cached:
    every Δ a power curve or `min_detectable_effect` tries reuses the same draws (common
    random numbers: the curve is then monotone, not jittered by resampling)."""
    rng = np.random.default_rng(seed)

    def one() -> np.ndarray:
        common = rng.standard_normal((reps, 1, n_max))
        own = rng.standard_normal((reps, tests, n_max))
        out = math.sqrt(rho) * common + math.sqrt(1.0 - rho) * own
        out.setflags(write=False)
        return out

    return (one(),) if paired else (one(), one())


@functools.lru_cache(maxsize=8)
def _other_groups(reps: int, tests: int, n_max: int, groups: int, seed: int) -> np.ndarray:
    """Each other pooled group's sample variance at every seed count n (axis -1, n = 2..n_max at
    index n − 2), (reps, tests, groups − 2, n_max − 1); drawn apart from `_draws`, so that the
    two sides' seeds are the same with and without pooling."""
    rng = np.random.default_rng([seed, groups])
    x = rng.standard_normal((reps, tests, groups - 2, n_max))
    out = np.stack([x[..., :n].var(axis=-1, ddof=1) for n in range(2, n_max + 1)], axis=-1)
    out.setflags(write=False)
    return out


def simulate(
    design: Design,
    delta_over_std: float,
    *,
    paired: bool = True,
    reps: int = REPS,
    seed: int = RNG_SEED,
    rho: float = RHO,
    groups: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the design's decision rule on `reps` simulated comparisons.

    Returns (rejected, delta), each of shape (reps, tests_per_look): whether each test's
    verdict at the last look taken is better/worse, and that look's Δ. The tests of one
    look (the two grid points of `at: both`) are correlated `rho` per seed. `groups`: the
    points a pooled design's variance is pooled over (the two sides included).
    """
    rejected, delta, _ = _run(design, delta_over_std, paired, reps, seed, rho, groups)
    return rejected, delta


def stopping_seeds(
    design: Design,
    delta_over_std: float,
    paired: bool = True,
    *,
    reps: int = REPS,
    seed: int = RNG_SEED,
    rho: float = RHO,
    groups: int = 2,
) -> dict[int, float]:
    """Seed count -> the probability that one comparison's seeds stop there (its last
    look; the design's largest when no look resolves every tested Δ), simulated through
    the decision rule at a true Δ of `delta_over_std` seed-to-seed stds. What a sequential
    design costs: its worst case is the largest look, its expected case the mean of this."""
    _, _, used = _run(design, delta_over_std, paired, reps, seed, rho, groups)
    counts = np.bincount(used, minlength=max(design.looks) + 1)
    return {n: float(counts[n]) / reps for n in range(len(counts)) if counts[n]}


def _run(
    design: Design, delta_over_std: float, paired: bool, reps: int, seed: int, rho: float, groups: int = 2
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`simulate`, also returning each simulated comparison's seed count at its last look."""
    tests = design.tests_per_look
    noise = _draws(reps, tests, max(design.looks), seed, rho, paired)
    if paired:
        diffs = delta_over_std + noise[0]
    else:
        x, y = delta_over_std + noise[0], noise[1]
    pooled = design.pooled and not paired
    others = _other_groups(reps, tests, max(design.looks), groups, seed) if pooled and groups > 2 else None
    rejected = np.zeros((reps, tests), dtype=bool)
    delta = np.zeros((reps, tests))
    stopped = np.zeros(reps, dtype=bool)
    used = np.full(reps, max(design.looks))
    for n in design.testing_looks:
        if pooled:
            result = _pooled_look(x[..., :n], y[..., :n], others, groups)
        else:
            result = paired_t(diffs[..., :n]) if paired else welch_t(x[..., :n], y[..., :n])
        now = rejects(design_p(result.p, design), design.alpha) & (result.delta != 0.0)
        going = ~stopped
        rejected[going] = now[going]
        delta[going] = result.delta[going]
        used[going & now.all(axis=1)] = n
        stopped |= now.all(axis=1)  # more seeds while any tested Δ is unresolved
    return rejected, delta, used


def _pooled_look(x: np.ndarray, y: np.ndarray, others: np.ndarray | None, groups: int):
    """`decision.pooled_t` at one look of n seeds: the two sides' variances with the other groups'."""
    n = x.shape[-1]
    total = x.var(axis=-1, ddof=1) + y.var(axis=-1, ddof=1)
    if others is not None:
        total = total + others[..., n - 2].sum(axis=-1)
    return pooled_t(x.mean(axis=-1) - y.mean(axis=-1), n, n, total / groups, groups * (n - 1.0))


def false_positive_rate(
    design: Design, paired: bool = True, *, reps: int = REPS, seed: int = RNG_SEED, rho: float = RHO, groups: int = 2
) -> float:
    """Share of comparisons with no true difference that end with any verdict
    better/worse (any of the look's tests), simulated through the decision rule."""
    rejected, _ = simulate(design, 0.0, paired=paired, reps=reps, seed=seed, rho=rho, groups=groups)
    return float(rejected.any(axis=1).mean())


def _exact(design: Design, paired: bool) -> bool:
    return (paired or design.pooled) and len(design.looks) == 1 and design.tests_per_look == 1


def exact_power(n: int, delta_over_std: float, alpha: float, *, paired: bool = True, groups: int = 2) -> float:
    """Two-sided t-test power from the noncentral t (both tails); unpaired: the pooled
    test's over `groups` points of n seeds (2: Welch's df at equal variances, an upper
    bound of Welch's power)."""
    if n < 2:
        return 0.0
    df = n - 1.0 if paired else groups * (n - 1.0)
    nc = delta_over_std * (math.sqrt(n) if paired else math.sqrt(n / 2.0))
    crit = stats.t.ppf(1.0 - alpha / 2.0, df)
    # The lower tail P(T < -crit) as sf(crit) of the mirrored nct: scipy's nct.cdf returns nan
    # far in the lower tail (e.g. df 2, nc 8.57), the mirrored upper tail underflows to 0.
    return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc))


def power(
    design: Design,
    delta_over_std: float,
    paired: bool = True,
    *,
    reps: int = REPS,
    seed: int = RNG_SEED,
    rho: float = RHO,
    groups: int = 2,
) -> float:
    """Probability that the headline comparison (the first test of a look) ends with the
    right verdict when the true Δ is `delta_over_std` seed-to-seed stds."""
    if _exact(design, paired):
        return exact_power(design.looks[0], abs(delta_over_std), design.look_alpha(), paired=paired, groups=groups)
    rejected, delta = simulate(design, abs(delta_over_std), paired=paired, reps=reps, seed=seed, rho=rho, groups=groups)
    return float((rejected[:, 0] & (delta[:, 0] > 0)).mean())


_power = power  # `min_detectable_effect`'s argument `power` (the target) shadows the function


def min_detectable_effect(
    design: Design,
    power: float = POWER,
    paired: bool = True,
    *,
    reps: int = REPS,
    seed: int = RNG_SEED,
    rho: float = RHO,
    groups: int = 2,
) -> float | None:
    """The smallest Δ (in seed-to-seed stds) detected with probability `power`; None
    when the design cannot test at all (fewer than 2 seeds)."""
    if not design.testing_looks:
        return None
    target = power

    def gap(d: float) -> float:
        return _power(design, d, paired, reps=reps, seed=seed, rho=rho, groups=groups) - target

    high = 1.0
    while gap(high) < 0.0:
        high *= 2.0
        if high > 1e3:
            return None
    return float(optimize.brentq(gap, 0.0, high, xtol=2e-3))  # 0.002 std: finer than anyone plans by
