"""Forecast a comparison at a size that was not trained: fit each variant's objective against
its parameter count on a width ladder, extrapolate, and decide from the prediction interval.

Input: per variant, per ladder rung (one width), the per-seed objectives (test perplexity)
at the rate the rung was trained at (`forecast:` trains every rung at its proxy's transferred
lr*, `study.spec.ForecastConfig`). Everything is fitted in logs, z = ln L: a seed's
perplexity scatters roughly in proportion to it, and a difference of logs is the log-ratio
the width analysis (`analysis.width_scaling`) reports. With x = ln(N / N_ref) (N_ref: the
geometric mean of the ladder's parameter counts, for conditioning):

    power                ln L = c_k − α_k·x                 two per variant
    power_shared         ln L = c_k − α·x                   one per variant, α shared
    saturating_shared    ln L = ln(e^{e_k} + e^{a_k − α·x}) two per variant, α shared
                         (L = E_k + A_k·N^−α)
    floor_shared         ln L = ln(e^{e} + e^{a_k − α·x})   one per variant, E and α shared

Which form and what is shared is decided by held-out error (`holdout_errors`: fit on every
rung but the widest, forecast the widest); the default (`DEFAULT_FORM`) is the form the
measured ladders chose, docs/results/forecast.md.

The fit is least squares on one point per variant and rung, the mean of the rung's seeds:
the seeds of one rung share its rate and its departure from the law (a rung-level effect),
so seed-level points would count them as independent and under-cover, as in
`analysis.width_scaling`. The variance of one rung's seed mean around the law is the
residual variance v = s² = RSS / df: it holds the seed spread (σ²/S, S seeds per rung) and
the law's departure at a rung, both of which the target's own S-seed mean also has. The
prediction of the S-seed mean at the target, and of a difference of two variants there, is

    ẑ ± t_{df, (1+level)/2} · sqrt(g Cov gᵀ + v)          Cov = v (JᵀJ)⁺

with g the gradient of the forecast (or of the difference) in the parameters (the fit's
uncertainty), v the new mean's own scatter (twice it for a difference: two independent
draws) and df the residual degrees of freedom (none: an unbounded interval). Exact for the
linear forms when the law holds; the simulation in tests/analysis/test_forecast.py checks
the coverage of every form. σ² itself (pooled within-rung seed variance) gives the lack-of-fit
test: s² against σ²/S, an F test (`LadderFit.lack_of_fit_p`). A forecast verdict: "worse" when the difference's
interval lies above 0 (the variant's objective higher), "better" below, else "unresolved";
decided at the interval's level, each comparison alone (no family-wise correction).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
from scipy import optimize, stats

FormName = Literal["power", "power_shared", "saturating_shared", "floor_shared"]
FORMS: tuple[str, ...] = get_args(FormName)
# The form the held-out errors of the measured ladders chose (docs/results/forecast.md).
DEFAULT_FORM: FormName = "power_shared"
DEFAULT_LEVEL = 0.90
MIN_RUNGS = 3  # a law and its residual need at least three widths per variant


@dataclass(frozen=True)
class Rung:
    """One variant at one ladder width: its parameter count and per-seed objectives (> 0)."""

    params: float
    values: tuple[float, ...]


Ladders = Mapping[str, Sequence[Rung]]  # variant -> its rungs


@dataclass(frozen=True)
class LadderFit:
    form: str
    variants: tuple[str, ...]
    theta: np.ndarray  # the form's parameters (`_layout`)
    cov: np.ndarray  # their covariance, v (JᵀJ)⁺
    unit_var: float  # v = s² = RSS / df: one rung's seed mean around the law (log units; nan with df 0)
    seed_var: float  # σ²: pooled within-rung seed variance (log units; nan with one seed)
    seed_df: int
    seeds: float  # S: mean seeds per rung
    df: int  # residual degrees of freedom
    n_ref: float

    @property
    def lack_of_fit_p(self) -> float:
        """P(s² at least this large | the law holds and only seeds scatter): F(df, seed_df)."""
        if self.df < 1 or self.seed_df < 1 or not self.seed_var > 0:
            return float("nan")
        return float(stats.f.sf(self.unit_var / (self.seed_var / self.seeds), self.df, self.seed_df))

    def predict(self, variant: str, params: float) -> tuple[float, np.ndarray]:
        """ẑ = ln L̂ of `variant` at `params`, and its gradient in theta."""
        k = self.variants.index(variant)
        x = math.log(params / self.n_ref)
        return _value_and_grad(self.form, len(self.variants), self.theta, k, x)


@dataclass(frozen=True)
class Forecast:
    variant: str
    params: float
    log_value: float  # ẑ
    low: float  # prediction interval, log units
    high: float
    level: float

    @property
    def value(self) -> float:
        return math.exp(self.log_value)

    def covers(self, log_value: float) -> bool:
        return self.low <= log_value <= self.high


@dataclass(frozen=True)
class ForecastDelta:
    """ln L_variant − ln L_baseline at the target (a log-ratio) with its prediction interval."""

    variant: str
    baseline: str
    delta: float
    low: float
    high: float
    level: float

    @property
    def verdict(self) -> str:
        return verdict(self.low, self.high)

    def covers(self, delta: float) -> bool:
        return self.low <= delta <= self.high


def verdict(low: float, high: float) -> str:
    """The forecast verdict of a difference's interval (lower objective is better)."""
    if low > 0:
        return "worse"
    if high < 0:
        return "better"
    return "unresolved"


def n_params(form: str, n_variants: int) -> int:
    return {
        "power": 2 * n_variants,
        "power_shared": n_variants + 1,
        "saturating_shared": 2 * n_variants + 1,
        "floor_shared": n_variants + 2,
    }[form]


def _value_and_grad(form: str, K: int, theta: np.ndarray, k: int, x: float) -> tuple[float, np.ndarray]:
    g = np.zeros(len(theta))
    if form == "power":  # theta: c_1..c_K, α_1..α_K
        g[k], g[K + k] = 1.0, -x
        return theta[k] - theta[K + k] * x, g
    if form == "power_shared":  # c_1..c_K, α
        g[k], g[K] = 1.0, -x
        return theta[k] - theta[K] * x, g
    if form == "saturating_shared":  # e_1..e_K, a_1..a_K, α
        e, a, alpha = theta[k], theta[K + k], theta[2 * K]
        parts = np.array([e, a - alpha * x])
        value = float(np.logaddexp(*parts))
        w = np.exp(parts - value)  # softmax weights: the share of E and of A·N^−α
        g[k], g[K + k], g[2 * K] = w[0], w[1], -x * w[1]
        return value, g
    if form == "floor_shared":  # a_1..a_K, e, α
        e, a, alpha = theta[K], theta[k], theta[K + 1]
        parts = np.array([e, a - alpha * x])
        value = float(np.logaddexp(*parts))
        w = np.exp(parts - value)
        g[K], g[k], g[K + 1] = w[0], w[1], -x * w[1]
        return value, g
    raise ValueError(f"unknown form {form!r}; forms: {', '.join(FORMS)}")


def _points(ladders: Ladders):
    """(variants, variant index, ln N, mean ln L per point, pooled seed variance and its df,
    mean seeds per rung, N_ref)."""
    names, ks, logn, means, ss, dof, counts = list(ladders), [], [], [], 0.0, 0, []
    for k, name in enumerate(names):
        for rung in ladders[name]:
            z = np.log(np.asarray(rung.values, dtype=np.float64))
            if len(z) == 0 or not np.all(np.isfinite(z)):
                raise ValueError(f"{name}: a rung at {rung.params:g} parameters has no finite positive values")
            ks.append(k)
            logn.append(math.log(rung.params))
            means.append(float(z.mean()))
            counts.append(len(z))
            if len(z) > 1:
                ss += float(((z - z.mean()) ** 2).sum())
                dof += len(z) - 1
    seed_var = ss / dof if dof else float("nan")
    log_params = np.asarray(logn)
    return (
        names,
        np.asarray(ks),
        log_params,
        np.asarray(means),
        seed_var,
        dof,
        float(np.mean(counts)),
        float(np.exp(log_params.mean())),
    )


def _initial(form: str, K: int, ks: np.ndarray, x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """A start from the shared power law (linear least squares), which every form contains
    near E -> 0."""
    design = np.zeros((len(z), K + 1))
    design[np.arange(len(z)), ks] = 1.0
    design[:, K] = -x
    sol = np.linalg.lstsq(design, z, rcond=None)[0]
    c, alpha = sol[:K], max(float(sol[K]), 0.05)
    if form == "power":
        return np.concatenate([c, np.full(K, alpha)])
    if form == "power_shared":
        return np.concatenate([c, [alpha]])
    floor = np.array([z[ks == k].min() for k in range(K)]) + math.log(0.5)  # E at half the best
    if form == "saturating_shared":
        return np.concatenate([floor, c + math.log(0.5), [alpha]])
    return np.concatenate([c + math.log(0.5), [float(floor.min())], [alpha]])


def fit_ladders(ladders: Ladders, form: str = DEFAULT_FORM) -> LadderFit:
    """Fit `form` to every variant's ladder jointly (shared parameters shared across them)."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; forms: {', '.join(FORMS)}")
    names, ks, logn, z, seed_var, seed_df, seeds, n_ref = _points(ladders)
    K, p = len(names), n_params(form, len(names))
    if len(z) < p:
        raise ValueError(f"form {form} has {p} parameters for {len(z)} rung means: not identifiable")
    x = logn - math.log(n_ref)

    def residuals(theta):
        return np.array([_value_and_grad(form, K, theta, int(k), float(xi))[0] for k, xi in zip(ks, x)]) - z

    def jacobian(theta):
        return np.array([_value_and_grad(form, K, theta, int(k), float(xi))[1] for k, xi in zip(ks, x)])

    theta0 = _initial(form, K, ks, x, z)
    if form in ("power", "power_shared"):
        theta = np.linalg.lstsq(jacobian(theta0), z, rcond=None)[0]  # linear in theta
    else:
        theta = optimize.least_squares(residuals, theta0, jac=jacobian, method="lm").x
    r, J = residuals(theta), jacobian(theta)
    df = len(z) - p
    unit_var = float(r @ r) / df if df > 0 else float("nan")
    cov = (unit_var if df > 0 else 0.0) * np.linalg.pinv(J.T @ J)
    return LadderFit(form, tuple(names), theta, cov, unit_var, seed_var, seed_df, seeds, df, n_ref)


def _half_width(fit: LadderFit, g: np.ndarray, new_var: float, level: float) -> float:
    if fit.df < 1:
        return float("inf")  # no residual: the law's departure is unknown
    t = stats.t.ppf(0.5 + level / 2, fit.df)
    return float(t * math.sqrt(max(float(g @ fit.cov @ g), 0.0) + new_var))


def forecast(fit: LadderFit, variant: str, params: float, level: float = DEFAULT_LEVEL) -> Forecast:
    """The S-seed mean of ln L for `variant` at `params`, with its `level` prediction interval."""
    z, g = fit.predict(variant, params)
    half = _half_width(fit, g, fit.unit_var, level)
    return Forecast(variant, params, z, z - half, z + half, level)


def forecast_delta(
    fit: LadderFit,
    variant: str,
    baseline: str,
    variant_params: float,
    baseline_params: float,
    level: float = DEFAULT_LEVEL,
) -> ForecastDelta:
    """ln L_variant − ln L_baseline at the target sizes, with its `level` prediction interval."""
    zv, gv = fit.predict(variant, variant_params)
    zb, gb = fit.predict(baseline, baseline_params)
    half = _half_width(fit, gv - gb, 2 * fit.unit_var, level)
    d = zv - zb
    return ForecastDelta(variant, baseline, d, d - half, d + half, level)


@dataclass(frozen=True)
class HoldoutError:
    """A form's error forecasting every variant's widest rung from its narrower ones."""

    form: str
    errors: dict[str, float]  # variant -> ẑ − measured mean ln L at the widest rung
    identifiable: bool

    @property
    def rms(self) -> float:
        if not self.identifiable or not self.errors:
            return float("nan")
        return math.sqrt(sum(e * e for e in self.errors.values()) / len(self.errors))


def holdout_errors(ladders: Ladders, forms: Sequence[str] = FORMS) -> list[HoldoutError]:
    """Leave the widest rung of every variant out, fit each form on the rest, forecast it.
    A form with more parameters than the remaining rung means is not identifiable there."""
    inner, held = {}, {}
    for name, rungs in ladders.items():
        ordered = sorted(rungs, key=lambda r: r.params)
        inner[name], held[name] = ordered[:-1], ordered[-1]
    out = []
    for form in forms:
        n_points = sum(len(r) for r in inner.values())
        if n_points < n_params(form, len(inner)):
            out.append(HoldoutError(form, {}, False))
            continue
        fit = fit_ladders(inner, form)
        errors = {
            name: fit.predict(name, rung.params)[0] - float(np.mean(np.log(rung.values))) for name, rung in held.items()
        }
        out.append(HoldoutError(form, errors, True))
    return out


def extrapolation(ladders: Ladders, params: float) -> float:
    """How far a forecast reaches: target parameters over the ladder's largest."""
    return params / max(r.params for rungs in ladders.values() for r in rungs)
