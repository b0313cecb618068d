"""Benchmark rows, ratios, the CPU and GPU targets, and their table / JSON / markdown forms."""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cem_ablate.bench.variants import BASELINE, EXTERNAL, is_energy_lens

MB = 1024 * 1024


@dataclass
class Row:
    size: str
    variant: str
    mode: str  # eager | compiled
    precision: str  # fp32 | bf16
    tokens_per_step: int
    params: int
    train_flops_per_token: float
    step_s: list[float] = field(default_factory=list)  # timed samples
    warmup_s: float = math.nan  # first steps, compile included
    state_bytes: int = 0  # weights + optimizer state held between steps
    step_peak_bytes: int | None = None  # peak allocated inside the step, above state
    peak_flops: float = math.nan  # device peak for this precision
    memory_only: bool = False
    cpu_contention: float | None = None  # share of the timing phase other tasks waited for a CPU
    profile: dict | None = None  # bench.profile.StepProfile.to_dict() when the bench profiled the case
    error: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.size, self.mode, self.precision

    def _tokens_per_s(self, seconds: float) -> float:
        return self.tokens_per_step / seconds if seconds > 0 else math.nan

    @property
    def tokens_per_s_median(self) -> float:
        return self._tokens_per_s(sorted(self.step_s)[len(self.step_s) // 2]) if self.step_s else math.nan

    @property
    def tokens_per_s_best(self) -> float:
        return self._tokens_per_s(min(self.step_s)) if self.step_s else math.nan

    @property
    def flops_per_s(self) -> float:
        return self.tokens_per_s_median * self.train_flops_per_token

    @property
    def mfu(self) -> float:
        return self.flops_per_s / self.peak_flops

    @property
    def mfu_best(self) -> float:
        return self.tokens_per_s_best * self.train_flops_per_token / self.peak_flops

    @property
    def peak_bytes(self) -> int | None:
        return None if self.step_peak_bytes is None else self.state_bytes + self.step_peak_bytes

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            tokens_per_s_median=self.tokens_per_s_median,
            tokens_per_s_best=self.tokens_per_s_best,
            flops_per_s=self.flops_per_s,
            mfu=self.mfu,
            mfu_best=self.mfu_best,
            peak_bytes=self.peak_bytes,
        )
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}


def _find(rows: list[Row], variant: str, key: tuple, memory_only: bool = False) -> Row | None:
    for row in rows:
        if row.variant == variant and row.key == key and row.memory_only == memory_only and not row.error:
            return row
    return None


def speed_ratio(rows: list[Row], row: Row, reference: str = BASELINE, statistic: str = "paired") -> float:
    """tokens/s of `row` over the reference variant's (same size, mode and precision).

    paired (default, used for the targets): median over rounds of the per-round ratio.
    Cases are timed round-robin, one step each per round, so a round's ratio compares
    steps taken within a minute of each other, and the median over rounds discards
    the rounds a burst of load hit unevenly. best: ratio of the fastest samples
    (timeit's rule, valid when noise only ever adds time). On the shared 2-core host
    it does not: matmul throughput itself swings from second to second with no steal
    or contention visible, and whole rounds run faster than the cases' own medians, so
    a best ratio mostly says which case caught such a moment (measured: see
    benchmarks/README.md). median: ratio of the medians.
    """
    ref = _find(rows, reference, row.key)
    if ref is None or not row.step_s or not ref.step_s:
        return math.nan
    if statistic == "best":
        return row.tokens_per_s_best / ref.tokens_per_s_best
    if statistic == "median" or len(ref.step_s) != len(row.step_s):
        return row.tokens_per_s_median / ref.tokens_per_s_median
    return statistics.median(_round_ratios(ref, row))


def _round_ratios(ref: Row, row: Row) -> list[float]:
    return [r / s for r, s in zip(ref.step_s, row.step_s)]


MIN_ROUNDS_FOR_INTERVAL = 6  # below, no order-statistic interval reaches 95% (2 / 2^5 > 0.05)


def paired_interval(rows: list[Row], row: Row, reference: str = BASELINE, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median per-round ratio (the paired statistic):
    order statistics of the rounds by the binomial law (scipy's `quantile_test`), coverage
    >= `level` for independent rounds of any continuous distribution; nan where the rounds
    are too few for `level` (5 or fewer at 95%). The percentile bootstrap it replaces
    covered less than the 95% it stated (simulated: see benchmarks/README.md)."""
    ref = _find(rows, reference, row.key)
    if ref is None or not row.step_s or len(ref.step_s) != len(row.step_s):
        return math.nan, math.nan
    import numpy as np
    from scipy import stats

    ratios = np.asarray(_round_ratios(ref, row))
    interval = stats.quantile_test(ratios, q=float(np.median(ratios)), p=0.5).confidence_interval(level)
    return float(interval.low), float(interval.high)


def flop_bound_ratio(rows: list[Row], row: Row, reference: str = BASELINE) -> float:
    """The tokens/s ratio if both ran at the same FLOP/s: reference FLOPs / row FLOPs."""
    ref = _find(rows, reference, row.key)
    if ref is None or row.memory_only:
        return math.nan
    return ref.train_flops_per_token / row.train_flops_per_token


def memory_ratio(rows: list[Row], row: Row, reference: str) -> float:
    ref = _find(rows, reference, row.key, memory_only=row.memory_only) or _find(rows, reference, row.key)
    if ref is None or ref.peak_bytes is None or row.peak_bytes is None:
        return math.nan
    return row.peak_bytes / ref.peak_bytes


# -- CPU targets (fp32, the `bench` size) ---------------------------------------------
@dataclass
class Target:
    name: str
    measured: float
    threshold: float
    higher_is_better: bool = True
    low: float = math.nan  # speed targets: 95% interval of the paired ratio (`paired_interval`; nan: too
    high: float = math.nan  # few rounds)
    best: float = math.nan  # speed targets: ratio of the best samples, for comparison

    @property
    def within_noise(self) -> bool:
        """The threshold lies inside the measured interval: this run cannot tell."""
        return self.low <= self.threshold <= self.high

    @property
    def interval_unknown(self) -> bool:
        """A speed target whose rounds were too few for an interval (`paired_interval`)."""
        return not math.isnan(self.best) and math.isnan(self.low)

    @property
    def met(self) -> bool | None:
        if math.isnan(self.measured):
            return None
        return self.measured >= self.threshold if self.higher_is_better else self.measured <= self.threshold


SPEED_TARGETS = [  # (variant, reference, threshold): fp32 tokens/s ratios
    (BASELINE, EXTERNAL, 1.0),
    ("cem_attn_t1", BASELINE, 1.0),
    ("cem_attn_t2", BASELINE, 0.8),
    ("cem_mlp_t1", BASELINE, 1.0),
    ("cem_mlp_t2", BASELINE, 0.85),
]
MEMORY_TARGETS = [("cem_full_t4_ckpt", "cem_full_t1", 1.3), ("cem_full_t8_ckpt", "cem_full_t1", 1.6)]
MFU_TARGET = 0.5
# Every energy-lens variant (`bench.variants.is_energy_lens`, docs/design/energy-lens.md#s11-energy-lens) at >= 0.95 of its
# FLOP bound against Llama: the options must cost no more than their FLOPs
ENERGY_LENS_TARGET = 0.95


def evaluate_targets(rows: list[Row], size: str = "bench") -> list[Target]:
    """The CPU targets on fp32 rows of `size`: speed ratios (paired, see `speed_ratio`)
    eager and compiled, MFU compiled (median step), peak memory ratios; and the energy-lens
    targets: each such variant's paired ratio to Llama over its FLOP-bound ratio."""
    out = []
    for mode in ("eager", "compiled"):
        key = (size, mode, "fp32")
        for variant, reference, threshold in SPEED_TARGETS:
            row = _find(rows, variant, key)
            if row is not None and (variant != BASELINE or mode == "eager"):
                low, high = paired_interval(rows, row, reference)
                out.append(
                    Target(
                        f"{variant} / {reference} tokens/s, {mode}",
                        speed_ratio(rows, row, reference),
                        threshold,
                        low=low,
                        high=high,
                        best=speed_ratio(rows, row, reference, statistic="best"),
                    )
                )
        for row in rows:  # energy-lens variants: paired ratio ÷ FLOP bound, with the interval
            if (
                row.key == key
                and is_energy_lens(row.variant)
                and not row.memory_only
                and not row.error
                and _find(rows, BASELINE, key) is not None
            ):
                bound = flop_bound_ratio(rows, row)
                out.append(
                    _speed_target(
                        f"{row.variant} / llama tokens/s ÷ FLOP bound {bound:.3f}, {mode}",
                        rows,
                        row,
                        BASELINE,
                        ENERGY_LENS_TARGET,
                        per=bound,
                    )
                )
    for row in rows:
        if (
            row.size == size
            and row.mode == "compiled"
            and row.precision == "fp32"
            and not row.memory_only
            and row.variant != EXTERNAL
            and not row.error
        ):
            out.append(Target(f"{row.variant} MFU, compiled", row.mfu, MFU_TARGET))
    for variant, reference, threshold in MEMORY_TARGETS:
        for row in rows:
            if row.variant == variant and row.size == size and row.precision == "fp32" and row.peak_bytes:
                out.append(
                    Target(
                        f"{variant} / {reference} peak memory, {row.mode}",
                        memory_ratio(rows, row, reference),
                        threshold,
                        higher_is_better=False,
                    )
                )
    return out


# -- GPU targets (bf16, paper sizes) ------------------------------------------------------
# Llama compiled MFU: litgpt and llm-foundry report 44-56% for 125M-1B models on A100,
# OLMo-core 39-40% for 1B on H100 (published references for a tuned Llama step).
GPU_MFU_TARGET = 0.45
GPU_SPEED_TARGETS = [
    (BASELINE, EXTERNAL, 1.0, ("eager",)),  # HF Llama is measured eager
    ("cem_attn_t1", BASELINE, 0.9, ("eager", "compiled")),
]
GPU_T2_TARGET = 0.9  # every T = 2 variant: tokens/s ratio >= 0.9 x its FLOP-bound ratio
GPU_MEMORY_TARGETS = [("cem_full_t8_ckpt", "cem_full_t1", 1.6)]
_T2 = re.compile(r"^cem_(attn|mlp|full)_t2$")


def _speed_target(name: str, rows: list[Row], row: Row, reference: str, threshold: float, per: float = 1.0) -> Target:
    """A paired speed-ratio target; `per` divides the ratio (a FLOP-bound ratio)."""
    low, high = paired_interval(rows, row, reference)
    return Target(
        name,
        speed_ratio(rows, row, reference) / per,
        threshold,
        low=low / per,
        high=high / per,
        best=speed_ratio(rows, row, reference, statistic="best") / per,
    )


def evaluate_gpu_targets(rows: list[Row], sizes: list[str], precision: str = "bf16") -> list[Target]:
    """The GPU targets for each size: Llama vs HF Llama, CEM attention T = 1 vs Llama,
    every T = 2 variant vs its FLOP-bound ratio, Llama compiled MFU, T = 8 checkpointed
    peak memory vs T = 1."""
    out = []
    for size in sizes:
        for mode in ("eager", "compiled"):
            key = (size, mode, precision)
            for variant, reference, threshold, modes in GPU_SPEED_TARGETS:
                row = _find(rows, variant, key)
                if row is not None and mode in modes and _find(rows, reference, key) is not None:
                    out.append(
                        _speed_target(
                            f"{size}: {variant} / {reference} tokens/s, {mode}", rows, row, reference, threshold
                        )
                    )
            for row in rows:
                if row.key == key and _T2.match(row.variant) and not row.memory_only and not row.error:
                    bound = flop_bound_ratio(rows, row)
                    out.append(
                        _speed_target(
                            f"{size}: {row.variant} / llama tokens/s ÷ FLOP bound {bound:.3f}, {mode}",
                            rows,
                            row,
                            BASELINE,
                            GPU_T2_TARGET,
                            per=bound,
                        )
                    )
        row = _find(rows, BASELINE, (size, "compiled", precision))
        if row is not None:
            out.append(Target(f"{size}: llama MFU, compiled", row.mfu, GPU_MFU_TARGET))
        for variant, reference, threshold in GPU_MEMORY_TARGETS:
            for row in rows:
                if row.variant == variant and row.size == size and row.precision == precision and row.peak_bytes:
                    out.append(
                        Target(
                            f"{size}: {variant} / {reference} peak memory, {row.mode}",
                            memory_ratio(rows, row, reference),
                            threshold,
                            higher_is_better=False,
                        )
                    )
    return out


# -- presentation ----------------------------------------------------------------------
def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def table(rows: list[Row]) -> str:
    """Markdown table: one line per timed case, then the memory-only cases."""
    head = (
        "| size | variant | mode | prec | tokens/s med | tokens/s best | × llama | × llama (best, med) | "
        "× hf_llama | FLOP-bound × llama | GFLOP/s | MFU | MFU best | peak MB | step MB | warm-up s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        if row.error:
            lines.append(f"| {row.size} | {row.variant} | {row.mode} | {row.precision} | error: {row.error} |")
            continue
        lines.append(
            "| "
            + " | ".join(
                [
                    row.size,
                    row.variant + (" (memory only)" if row.memory_only else ""),
                    row.mode,
                    row.precision,
                    _fmt(row.tokens_per_s_median, ".0f"),
                    _fmt(row.tokens_per_s_best, ".0f"),
                    _fmt(speed_ratio(rows, row), ".3f"),
                    f"{_fmt(speed_ratio(rows, row, statistic='best'), '.3f')}, "
                    f"{_fmt(speed_ratio(rows, row, statistic='median'), '.3f')}",
                    _fmt(speed_ratio(rows, row, EXTERNAL), ".3f"),
                    _fmt(flop_bound_ratio(rows, row), ".3f"),
                    _fmt(row.flops_per_s / 1e9, ".1f"),
                    _fmt(row.mfu, ".1%"),
                    _fmt(row.mfu_best, ".1%"),
                    _fmt(row.peak_bytes / MB if row.peak_bytes is not None else None, ".0f"),
                    _fmt(row.step_peak_bytes / MB if row.step_peak_bytes is not None else None, ".0f"),
                    _fmt(row.warmup_s, ".1f"),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


CONTENTION_WARNING = 0.10


def contention_note(rows: list[Row]) -> str:
    """A warning when other processes competed for the CPUs while cases were timed."""
    shares = [r.cpu_contention for r in rows if r.cpu_contention is not None]
    if not shares or max(shares) < CONTENTION_WARNING:
        return ""
    return (
        f"WARNING: other processes competed for the CPUs during timing (up to {max(shares):.0%} of the "
        "time a task waited for a CPU): step times, ratios and MFU of this run are unreliable. "
        "Rerun on an idle machine."
    )


def targets_table(targets: list[Target]) -> str:
    lines = ["| target | measured | 95% interval | best samples | threshold | met |", "|---|---|---|---|---|---|"]
    for t in targets:
        sign = "≥" if t.higher_is_better else "≤"
        met = {True: "yes", False: "**no**", None: "-"}[t.met]
        if t.met is not None and t.within_noise:
            met += " (within noise)"
        elif t.met is not None and t.interval_unknown:
            met += f" (no 95% interval: fewer than {MIN_ROUNDS_FOR_INTERVAL} rounds)"
        interval = "-" if math.isnan(t.low) else f"{t.low:.3f}-{t.high:.3f}"
        lines.append(
            f"| {t.name} | {_fmt(t.measured, '.3f')} | {interval} | {_fmt(t.best, '.3f')} "
            f"| {sign} {t.threshold} | {met} |"
        )
    return "\n".join(lines)


def profiles_text(rows: list[Row]) -> str:
    """Where each profiled case's step time goes (bench/profile.py), as markdown."""
    from cem_ablate.bench.profile import StepProfile, format_profile

    sections = [
        format_profile(f"{r.size} {r.variant} {r.mode} {r.precision}", StepProfile.from_dict(r.profile))
        for r in rows
        if r.profile
    ]
    return "### Where the step's time goes (profiler)\n\n" + "\n\n".join(sections) if sections else ""


def write_json(path: str | Path, rows: list[Row], targets: list[Target], meta: dict[str, Any]) -> None:
    payload = {
        "meta": meta,
        "rows": [
            r.to_dict()
            | {
                "ratio_vs_llama": _none(speed_ratio(rows, r)),
                "ratio_vs_llama_best": _none(speed_ratio(rows, r, statistic="best")),
                "ratio_vs_llama_of_medians": _none(speed_ratio(rows, r, statistic="median")),
                "ratio_vs_hf_llama": _none(speed_ratio(rows, r, EXTERNAL)),
                "flop_bound_ratio_vs_llama": _none(flop_bound_ratio(rows, r)),
            }
            for r in rows
        ],
        "targets": [
            {k: _none(v) for k, v in asdict(t).items()} | {"met": t.met, "within_noise": t.within_noise}
            for t in targets
        ],
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=_none))


def _none(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def read_json(path: str | Path) -> tuple[list[Row], dict[str, Any]]:
    """Rows and meta of a results file written by `write_json` (to re-render tables)."""
    payload = json.loads(Path(path).read_text())
    names = {f for f in Row.__dataclass_fields__}
    rows = [Row(**_row_fields(r, names)) for r in payload["rows"]]
    return rows, payload["meta"]


def _row_fields(stored: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A stored row's `Row` fields, NaN back where `write_json` wrote it as null."""
    return {
        k: (math.nan if v is None and k in ("warmup_s", "peak_flops", "train_flops_per_token") else v)
        for k, v in stored.items()
        if k in names
    }
