"""The study file: what a researcher writes (validated once, here, at the edge).

    name: quickstart
    base: {model: ..., train: ..., data: ...}    # one run config (cem-ablate train)
    variants:                                    # optional explicit list ...
      - {name: llama, set: {}}
      - {name: cem_attention, set: {model.attention: cem}}
    axes:                                        # ... times a cartesian product
      model.size: [86M, 108M]
    baselines:                                   # name -> overrides turning a variant
      llama: {model.attention: llama, model.mlp: llama}   # into its baseline
    lr_search: {method: grid, grid: [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]}
                                                 # or {method: transfer, proxy: {model.d_model: 64},
                                                 #     grid: [...]}: tune each variant's proxy on
                                                 # the grid, train it at the proxy's lr* (mup)
    seeds: [0]                                   # or {min: 2, max: 6, until: resolved}
    scale:                                       # named overrides, --scale NAME
      smoke: {base.train.max_steps: 20}
    execution: {workers: 2, threads: 1}          # defaults for --workers / --threads
    statistics: {alpha: 0.05, correction: holm}  # the report's family-wise error rate
    eval: {tasks: [hellaswag], limit: 500}       # lm-evaluation-harness on every finished trial
    forecast:                                    # lr_search method transfer under mup: every variant
      ladder: [{model.d_model: 64, model.d_mlp: 176}, ...]   # at each width, the objective
      target: {model.d_model: 1024, model.d_mlp: 2736}       # forecast at the target's size

Dotted keys in `set`, `axes`, `baselines` address the run config (`model.mlp.name`);
in `scale` and `--set` they address the study file itself (`base.train.lr`,
`lr_search.grid`). A dotted key replaces the value at that path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from cem_ablate.analysis.forecast import DEFAULT_FORM, DEFAULT_LEVEL, MIN_RUNGS, FormName
from cem_ablate.config import apply_overrides, load_yaml, parse, require
from cem_ablate.config.errors import ConfigError, unknown
from cem_ablate.config.loading import set_dotted
from cem_ablate.config.schema import join

# Section 4.3 of the paper: five learning rates from 5e-4 to 8e-3, doubling.
PAPER_LR_GRID = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# The trial owns these two keys: they come from lr_search and seeds.
TRIAL_KEYS = ("train.lr", "train.seed")


@dataclass(frozen=True)
class LrSearchConfig:
    """How learning rates are chosen per variant (docs/design/experiments.md#s8-learning-rate-search)."""

    method: Literal["grid", "tpe", "random", "transfer"] = (
        "grid"  # grid; tpe / random: Optuna samplers; transfer: tune a proxy
    )
    grid: list[float] = field(default_factory=lambda: list(PAPER_LR_GRID))  # grid / transfer: the learning rates tried
    # grid: a one-rate grid on purpose, comparing the variants at that rate (the paper's fixed-rate
    # protocol) with no lr* estimated; without it a one-rate grid is refused before anything trains
    fixed: bool = False
    # transfer (study/transfer.py): run-config overrides that turn each variant into its proxy
    # (e.g. {model.d_model: 64, model.d_mlp: 176}); the proxy is tuned on `grid` with
    # `proxy_seeds` (default: the study's seeds), the variant trained at the proxy's lr* only
    proxy: dict[str, Any] | None = None
    proxy_seeds: list[int] | None = None  # transfer: the proxy's seeds; null: the study's
    low: float | None = None  # tpe / random: log-uniform range and trial count
    high: float | None = None  # tpe / random: the range's upper end
    n_trials: int | None = None  # tpe / random: learning rates drawn per seed
    pruner: Literal["none", "median", "successive_halving"] = "none"  # Optuna pruner stopping unpromising trials early
    interpolation: Literal["akima", "makima"] = (
        "akima"  # the fit over log2(lr) that gives lr* and ppl* (docs/design/experiments.md#s8-learning-rate-search)
    )
    sampler_seed: int = 0  # tpe / random: the sampler's seed (plus the worker's index)

    def validate(self, path: str) -> None:
        if self.method != "transfer":
            for key in ("proxy", "proxy_seeds"):
                require(getattr(self, key) is None, join(path, key), "only applies to method transfer.")
        else:
            require(
                bool(self.proxy),
                join(path, "proxy"),
                "method transfer needs the run-config overrides of the proxy, e.g. {model.d_model: 64}.",
            )
            assert self.proxy is not None  # required just above
            for key in self.proxy:
                require(
                    isinstance(key, str) and key.split(".")[0] in ("model", "train", "data"),
                    join(join(path, "proxy"), key),
                    "must be a dotted key of the run config, starting with model., train. or data.",
                )
                require(
                    key not in TRIAL_KEYS,
                    join(join(path, "proxy"), key),
                    "is set per trial: the proxy is tuned over lr_search.grid and the seeds.",
                )
            if self.proxy_seeds is not None:
                require(len(self.proxy_seeds) > 0, join(path, "proxy_seeds"), "must hold at least one seed.")
                require(
                    len(set(self.proxy_seeds)) == len(self.proxy_seeds),
                    join(path, "proxy_seeds"),
                    f"holds a seed twice: {self.proxy_seeds}.",
                )
        require(not self.fixed or self.method == "grid", join(path, "fixed"), "only applies to method grid.")
        if self.method in ("grid", "transfer"):
            require(len(self.grid) > 0, join(path, "grid"), "must hold at least one learning rate.")
            # Akima's lr* needs at least three rates; one rate is a comparison at that rate, said so
            require(
                len(self.grid) > 1 or (self.method == "grid" and self.fixed),
                join(path, "grid"),
                f"one learning rate ({self.grid[0]:g}) estimates no lr*: list at least three rates, or "
                + (
                    "set lr_search.fixed: true to compare the variants at this rate."
                    if self.method == "grid"
                    else "tune the proxy over a grid."
                ),
            )
            for i, lr in enumerate(self.grid):
                require(lr > 0, join(join(path, "grid"), i), f"learning rates must be > 0, got {lr}.")
            require(
                len(set(self.grid)) == len(self.grid), join(path, "grid"), f"holds a learning rate twice: {self.grid}."
            )
            for key in ("low", "high", "n_trials"):
                require(
                    getattr(self, key) is None,
                    join(path, key),
                    f"only applies to method tpe or random, not {self.method}.",
                )
            return
        for key in ("low", "high", "n_trials"):
            require(getattr(self, key) is not None, join(path, key), f"is required with method {self.method}.")
        assert self.low is not None and self.high is not None and self.n_trials is not None  # required just above
        require(self.low > 0, join(path, "low"), f"learning rates must be > 0, got {self.low}.")
        require(self.high > self.low, join(path, "high"), f"must be greater than low ({self.low}), got {self.high}.")
        require(self.n_trials >= 1, join(path, "n_trials"), f"must be >= 1, got {self.n_trials}.")

    @property
    def lr_range(self) -> tuple[float, float]:
        """The log-uniform range Optuna suggests from (it covers the whole grid)."""
        if self.method in ("grid", "transfer"):
            return min(self.grid), max(self.grid)
        assert self.low is not None and self.high is not None  # validated: required with method tpe or random
        return self.low, self.high


@dataclass(frozen=True)
class ExecutionConfig:
    """How this machine runs the trials; `--workers` / `--threads` override it.

    Not part of any variant's identity: it changes speed, not results.
    """

    workers: int = 1  # local worker processes; 1 trains in the study process itself
    threads: int | None = None  # torch threads per worker; null: cores / workers (1 worker: torch's default)

    def validate(self, path: str) -> None:
        require(self.workers >= 1, join(path, "workers"), f"must be at least 1, got {self.workers}.")
        require(
            self.threads is None or self.threads >= 1,
            join(path, "threads"),
            f"must be at least 1 (or null), got {self.threads}.",
        )


@dataclass(frozen=True)
class SequentialSeeds(Sequence[int]):
    """`seeds: {min: 2, max: 6, until: resolved}`: sequential seeds (`study.sequential`).

    Every variant and its baseline start with seeds 0..min-1; while their Δ is
    unresolved (`study.sequential`: the report's verdict, the one decision rule at
    this design's per-look threshold and Holm over the study's tests), both get the
    next seed, up to seeds 0..max-1.
    `at` picks the Δ that decides: at the baseline's lr* grid point (`baseline`, the
    report's verdict), at the variant's own (`own`: variants whose optimum moves, as
    Table 3's depths), or either (`both`). As a sequence it is every seed the study may
    train (Optuna's choices for the seed, probes, the dry run's worst case); `initial`
    the first ones.
    Checked in `StudySpec.validate`, where an error keeps its key path.
    """

    min: int = 2  # seeds every variant and baseline trains first: 0..min-1
    max: int | None = None  # at most seeds 0..max-1
    until: Literal["resolved"] | None = None  # add seeds until the comparison is resolved (required)
    at: Literal["baseline", "own", "both"] = "baseline"  # the lr* grid point whose Δ decides

    @property
    def initial(self) -> list[int]:
        return list(range(self.min))

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        return list(range(self.max if self.max is not None else self.min))[i]

    def __len__(self) -> int:
        return self.max if self.max is not None else self.min

    def validate_seeds(self, path: str) -> None:
        require(
            self.until is not None,
            join(path, "until"),
            "is required in the mapping form of seeds (until: resolved); or give a list of seeds.",
        )
        require(self.max is not None, join(path, "max"), "is required with until: resolved.")
        assert self.max is not None  # required just above
        require(self.min >= 1, join(path, "min"), f"must be at least 1, got {self.min}.")
        require(self.max >= self.min, join(path, "max"), f"must be at least min ({self.min}), got {self.max}.")


def initial_seeds(seeds: list[int] | SequentialSeeds) -> list[int]:
    """The seeds every variant trains first (all of them, for a list)."""
    return seeds.initial if isinstance(seeds, SequentialSeeds) else list(seeds)


@dataclass(frozen=True)
class StatisticsConfig:
    """How verdicts are decided (`analysis.decision`, docs/guides/studies-and-verdicts.md, "How sure is a verdict").

    `alpha` is the false-positive rate of a whole report: its comparisons are one family,
    Holm-adjusted (`correction: holm`), or each tested at `alpha` alone (`none`). The
    sequential seed rule spends the same `alpha` over its looks. `variance: pooled` assumes
    one seed-to-seed variance for every model the report compares (one recipe), which
    gives two seeds per model the degrees of freedom of many.
    """

    alpha: float = 0.05  # the false-positive rate of the whole report
    correction: Literal["holm", "none"] = "holm"  # holm: the comparisons are one family; none: each at alpha
    variance: Literal["own", "pooled"] = (
        "own"  # own: an unpaired Δ's spread from its two sides (Welch); pooled: one seed variance from every point compared
    )

    def validate(self, path: str) -> None:
        # Above 0.5 a "verdict" is closer to a coin flip than to evidence.
        require(0.0 < self.alpha < 0.5, join(path, "alpha"), f"must be in (0, 0.5), got {self.alpha}.")


@dataclass(frozen=True)
class EvalConfig:
    """lm-evaluation-harness tasks scored on every finished trial (study/trial_eval.py):
    names the harness knows, or local task YAML under `include_path`; `limit` documents
    per task (null: all). Not part of any variant's identity: it adds metrics, never
    changes training."""

    tasks: list[str] = field(default_factory=list)  # harness task names (or local tasks under include_path)
    limit: int | None = None  # documents per task; null: all
    include_path: str | None = None  # a folder of local task YAML

    def validate(self, path: str) -> None:
        require(len(self.tasks) > 0, join(path, "tasks"), "must name at least one task.")
        require(self.limit is None or self.limit >= 1, join(path, "limit"), f"must be >= 1, got {self.limit}.")


@dataclass(frozen=True)
class ForecastConfig:
    """`forecast:` every variant (baselines included) trained at each width of `ladder`, at its
    proxy's transferred lr* (lr_search method transfer, parametrization mup), and its objective
    forecast at `target`, a size never trained (`analysis.forecast`, reporting/forecast_report.py).

    Checked once with the study file: at least three increasing widths, a wider target, method
    transfer under mup (`StudySpec.validate`). A width outside the range where transfer has
    been shown to hold gets a warning (study/trusted_widths.py; docs/results/forecast.md)."""

    # run-config overrides of each width, narrowest first; each sets model.d_model
    # (e.g. [{model.d_model: 64, model.d_mlp: 176}, {model.d_model: 128, model.d_mlp: 344}, ...])
    ladder: list[dict[str, Any]] = field(default_factory=list)
    target: dict[str, Any] = field(
        default_factory=dict
    )  # run-config overrides of the size forecast; sets model.d_model
    form: FormName = DEFAULT_FORM  # the law of objective against parameters (analysis.forecast)
    level: float = DEFAULT_LEVEL  # the prediction intervals' level; a verdict needs the Δ's to exclude 0

    @property
    def widths(self) -> list[int]:
        return [rung["model.d_model"] for rung in self.ladder]

    def validate(self, path: str) -> None:
        ladder = join(path, "ladder")
        require(
            len(self.ladder) >= MIN_RUNGS,
            ladder,
            f"needs at least {MIN_RUNGS} widths (a law and its residual), got {len(self.ladder)}.",
        )
        for i, rung in enumerate(self.ladder):
            _check_width_overrides(rung, join(ladder, i))
        widths = self.widths
        for i in range(1, len(widths)):
            require(
                widths[i] > widths[i - 1],
                join(join(ladder, i), "model.d_model"),
                f"the ladder's widths must increase, narrowest first: got {widths}.",
            )
        keys = set(self.ladder[0])
        for i, rung in enumerate(self.ladder):
            require(
                set(rung) == keys,
                join(ladder, i),
                f"every width sets the same keys ({', '.join(sorted(keys))}), got {', '.join(sorted(rung))}.",
            )
        _check_width_overrides(self.target, join(path, "target"))
        missing = sorted(keys - set(self.target))
        require(
            not missing, join(path, "target"), f"sets the keys every ladder width sets; missing {', '.join(missing)}."
        )
        require(
            self.target["model.d_model"] > widths[-1],
            join(join(path, "target"), "model.d_model"),
            f"the target ({self.target['model.d_model']}) must be wider than the ladder's widest width "
            f"({widths[-1]}): a forecast extrapolates past the ladder.",
        )
        require(0.0 < self.level < 1.0, join(path, "level"), f"must be in (0, 1), got {self.level}.")


def _check_width_overrides(overrides: Any, path: str) -> None:
    """A ladder width or the target: run-config overrides of the model that set model.d_model."""
    require(
        isinstance(overrides, dict),
        path,
        f"expected a mapping of model overrides, e.g. {{model.d_model: 64, model.d_mlp: 176}}, got {overrides!r}.",
    )
    for key in overrides:
        require(
            isinstance(key, str) and key.startswith("model."),
            join(path, key),
            "must be a dotted key of the model (model.d_model, model.d_mlp, ...): a ladder varies the size only.",
        )
    width = overrides.get("model.d_model")
    require(
        isinstance(width, int) and not isinstance(width, bool) and width > 0,
        join(path, "model.d_model"),
        f"is required: the width, a positive integer (got {width!r}).",
    )


@dataclass(frozen=True)
class VariantSpec:
    name: str  # letters, digits, '_', '.' or '-'
    set: dict[str, Any] = field(default_factory=dict)  # dotted run-config keys -> values, over base

    def validate(self, path: str) -> None:
        require(
            bool(NAME_PATTERN.match(self.name)),
            join(path, "name"),
            f"{self.name!r} must be letters, digits, '_', '.' or '-'.",
        )


@dataclass(frozen=True)
class StudySpec:
    name: str  # names the MLflow experiment and the Optuna studies
    base: dict[str, Any]  # one run config (as `cem-ablate train` reads), shared by every variant
    description: str = ""  # the MLflow experiment's note
    variants: list[VariantSpec] = field(default_factory=list)  # named overrides of base
    axes: dict[str, list[Any]] = field(default_factory=dict)  # dotted run-config key -> values: a cartesian product
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> overrides turning a variant into it
    lr_search: LrSearchConfig = field(default_factory=LrSearchConfig)
    seeds: list[int] | SequentialSeeds = field(default_factory=lambda: [0])  # a list, or sequential seeds
    scale: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> dotted study-file overrides (--scale)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    statistics: StatisticsConfig = field(default_factory=StatisticsConfig)
    eval: EvalConfig | None = None  # lm-evaluation-harness on every finished trial
    forecast: ForecastConfig | None = None  # a width ladder and the size its comparisons are forecast at

    def validate(self, path: str) -> None:
        require(
            bool(NAME_PATTERN.match(self.name)),
            join(path, "name"),
            f"{self.name!r} must be letters, digits, '_', '.' or '-' (it names the "
            "MLflow experiment and the Optuna studies).",
        )
        names = [v.name for v in self.variants]
        for i, name in enumerate(names):
            require(name not in names[:i], join(join(path, "variants"), i), f"variant name {name!r} is used twice.")
        if isinstance(self.seeds, SequentialSeeds):
            self.seeds.validate_seeds(join(path, "seeds"))
        else:
            require(len(self.seeds) > 0, join(path, "seeds"), "must hold at least one seed.")
            for i, seed in enumerate(self.seeds):
                require(seed >= 0, join(join(path, "seeds"), i), f"seeds must be >= 0, got {seed}.")
            require(len(set(self.seeds)) == len(self.seeds), join(path, "seeds"), f"holds a seed twice: {self.seeds}.")
        for key, values in self.axes.items():
            where = join(join(path, "axes"), key)
            require(len(values) > 0, where, "an axis needs at least one value.")
        # Every dotted key that addresses the run config, with where it was written.
        run_keys = [(f"axes.{k}", k) for k in self.axes]
        run_keys += [(f"variants[{i}].set.{k}", k) for i, v in enumerate(self.variants) for k in v.set]
        run_keys += [(f"baselines.{b}.{k}", k) for b, keys in self.baselines.items() for k in keys]
        for where, key in run_keys:
            require(
                key not in TRIAL_KEYS,
                join(path, where),
                "is set per trial: use lr_search for the learning rate and seeds for the seed.",
            )
            require(
                key.split(".")[0] in ("model", "train", "data"),
                join(path, where),
                "must be a dotted key of the run config, starting with model., train. or data.",
            )
        if self.forecast is not None:
            self._validate_forecast(path, run_keys)

    def _validate_forecast(self, path: str, run_keys: list[tuple[str, str]]) -> None:
        """A forecast trains each width at its proxy's lr*, which holds across width under mup only
        (docs/design/parametrization.md#s12-parametrization); the ladder owns the width."""
        where = join(path, "forecast")
        assert self.forecast is not None  # validate calls this only with a forecast
        require(
            self.lr_search.method == "transfer",
            join(path, "lr_search.method"),
            "a forecast trains every width at its proxy's transferred lr*: it needs method transfer "
            f"(lr_search: {{method: transfer, proxy: {{model.d_model: ...}}, grid: [...]}}), got {self.lr_search.method}.",
        )
        model = self.base.get("model") if isinstance(self.base, dict) else None
        base_parametrization = model.get("parametrization", "standard") if isinstance(model, dict) else "standard"
        require(
            base_parametrization == "mup",
            join(path, "base.model.parametrization"),
            f"a forecast needs parametrization: mup (lr* transfers across width under mup only, docs/design/parametrization.md#s12-parametrization), "
            f"got {base_parametrization}.",
        )
        overrides = list(run_keys) + [(f"forecast.target.{k}", k) for k in self.forecast.target]
        overrides += [(f"forecast.ladder[{i}].{k}", k) for i, rung in enumerate(self.forecast.ladder) for k in rung]
        for place, key in overrides:
            if key == "model.parametrization":
                value = self._override_value(place, key)
                require(value == "mup", join(path, place), f"a forecast needs parametrization: mup, got {value}.")
        for place, key in run_keys:
            require(
                key not in ("model.d_model", "model.size"),
                join(path, place),
                f"the forecast's ladder sets the width ({join(where, 'ladder')}); "
                "variants, axes and baselines may not.",
            )

    def _override_value(self, place: str, key: str) -> Any:
        head, _, rest = place.partition(".")
        if head == "axes":
            return next((v for v in self.axes[key] if v != "mup"), "mup")
        if head.startswith("variants["):
            return self.variants[int(head[len("variants[") : -1])].set[key]
        if head == "baselines":
            return self.baselines[rest.split(".")[0]][key]
        assert self.forecast is not None  # every other place is a forecast's (_validate_forecast)
        if head == "forecast" and rest.startswith("target."):
            return self.forecast.target[key]
        index = int(rest[len("ladder[") : rest.index("]")])
        return self.forecast.ladder[index][key]


def load_study_mapping(
    path: str | Path, scale: str | None = None, overrides: tuple[str, ...] | list[str] = ()
) -> dict[str, Any]:
    """Read the study file and apply `scale` and `--set` overrides (still unvalidated)."""
    raw = load_yaml(path)
    if scale is not None:
        scales = raw.get("scale") or {}
        if not scales:  # say so: an unknown-scale error would list no allowed scales ("Allowed: .")
            raise ConfigError(
                "--scale", f"the study file defines no scales (no `scale:` mapping), so there is no {scale!r}."
            )
        if not isinstance(scales, dict) or scale not in scales:
            raise unknown("--scale", scale, scales if isinstance(scales, dict) else (), what="scale")
        for key, value in (scales[scale] or {}).items():
            require(key.split(".")[0] != "scale", f"scale.{scale}.{key}", "a scale cannot change scales.")
            set_dotted(raw, key, value)
    return apply_overrides(raw, overrides)


def parse_study(mapping: dict[str, Any]) -> StudySpec:
    return parse(StudySpec, mapping, "")
