"""`cem-ablate bench --decode`: what each variant costs to serve, against Llama side by side.

Per variant and size, all in one process (models built once, cases timed round-robin
with the order rotated each round, bench/measure.py):

    prefill tok/s      one `context`-token prompt (batch 1) through `model/decoding.decode`
    decode tok/s b=N   `new_tokens` single-token steps after a `context`-token prefill, at
                       each batch size (tokens = N x new_tokens per sample)
    cache B/token      the decoding cache's bytes per cached token of one sequence
                       (`DecodingCache.bytes_per_token`, the weights' precision)
    peak MB            peak bytes allocated while prefilling and decoding at the largest batch,
                       above the weights (CPU: the profiler's allocation events; CUDA: the
                       allocator's peak)

each with its ratio to the Llama baseline of the same size (median over rounds of the
per-round ratio for speeds). The decode samples each start from the same prefilled
cache: `decode` never writes into a state tensor (it concatenates), so a shallow copy
of the per-block dicts is a fresh start.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from cem_ablate.bench.measure import CPUContention, step_peak_bytes, time_interleaved
from cem_ablate.bench.variants import BASELINE, SIZES, Variant, model_mapping, parse_variant
from cem_ablate.config.errors import unknown
from cem_ablate.config.schema import join, require
from cem_ablate.model import build_model, parse_model_config
from cem_ablate.model.decoding import DecodingCache, decode, missing_hooks, new_cache
from cem_ablate.model.transformer import CEMTransformer

MB = 1024 * 1024

# Every built-in component, plain reuse and the docs/design/energy-lens.md#s11-energy-lens model options, paper defaults elsewhere
# (bench/variants.py: kq_diag shared, diag_lowrank preconditioners).
DEFAULT_VARIANTS = (
    "llama",
    "cem_attn_t1",
    "cem_attn_t2",
    "cem_attn_t4",
    "cem_attn_t2_nodiag",
    "cem_attn_t2_perhead_exact",
    "cem_attn_t2_nesterov",
    "cem_mlp_t2",
    "cem_full_t2",
    "cem_full_t4",
    "cem_attn_reuse_t2={attention: {name: cem, steps: 2, depth_mode: reuse, kq_diag: shared}}",
    "hopfield_t2={mlp: {name: hopfield, steps: 2}}",
    "llama_nesterov_stream",
    "cem_full_t2_hb_stream={attention: {name: cem, steps: 2, kq_diag: shared}, mlp: {name: cem, steps: 2}, "
    "stream: heavy_ball}",
    "et_parallel_t2",
)


@dataclass(frozen=True)
class DecodeBenchConfig:
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    sizes: list[str] = field(default_factory=lambda: ["86M", "small", "mini", "tiny"])
    context: int = 2048  # prompt tokens before decoding (the paper's training context)
    new_tokens: int = 16  # single-token decoding steps per timed sample
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    vocab_size: int = 32000
    repeats: int = 5  # timed rounds per case
    device: str = "cpu"
    seed: int = 0

    def validate(self, path: str) -> None:
        for key in ("context", "new_tokens", "vocab_size", "repeats"):
            require(getattr(self, key) >= 1, join(path, key), f"must be >= 1, got {getattr(self, key)}.")
        require(
            bool(self.batch_sizes) and min(self.batch_sizes) >= 1,
            join(path, "batch_sizes"),
            f"needs batch sizes >= 1, got {self.batch_sizes}.",
        )
        require(bool(self.variants), join(path, "variants"), "needs at least one variant.")
        for i, size in enumerate(self.sizes):
            if size not in SIZES:
                raise unknown(join(join(path, "sizes"), i), size, SIZES, what="size")
        labels = [parse_variant(spec, join(join(path, "variants"), i)).label for i, spec in enumerate(self.variants)]
        require(len(labels) == len(set(labels)), join(path, "variants"), f"duplicate variant labels in {labels}.")
        external = [spec for spec in self.variants if parse_variant(spec).external]
        require(
            not external,
            join(path, "variants"),
            f"{external}: the decode bench measures this platform's "
            "decoding cache; transformers' Llama is not among its variants.",
        )
        require(
            self.device in ("cpu", "cuda") or self.device.startswith("cuda:"),
            join(path, "device"),
            f"expected cpu or cuda[:i], got {self.device!r}.",
        )
        if self.device.startswith("cuda"):
            require(torch.cuda.is_available(), join(path, "device"), f"{self.device}: no CUDA device.")

    @property
    def max_seq_len(self) -> int:
        return self.context + self.new_tokens


QUICK = {
    "sizes": ["tiny"],
    "context": 32,
    "new_tokens": 4,
    "vocab_size": 256,
    "repeats": 2,
    "variants": ["llama", "cem_attn_t1", "cem_attn_t4", "cem_full_t2", "et_parallel_t2"],
}


@dataclass
class DecodeRow:
    size: str
    variant: str
    params: int
    cache_bytes_per_token: float = math.nan
    prefill_s: list[float] = field(default_factory=list)  # seconds per prefill of `context` tokens
    decode_s: dict[str, list[float]] = field(default_factory=dict)  # batch -> seconds per `new_tokens` steps
    peak_bytes: int | None = None
    recomputes: bool = False  # a sublayer has no decoding hook
    cpu_contention: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_decode_bench(cfg: DecodeBenchConfig, log: Callable[[str], None] = print) -> tuple[list[DecodeRow], dict]:
    device = torch.device(cfg.device)
    rows: list[DecodeRow] = []
    for size in cfg.sizes:
        cases = []
        for spec in cfg.variants:
            variant = parse_variant(spec)
            try:
                cases.append(_Case(variant, size, cfg, device))
                log(f"{size} {variant.label}: built ({cases[-1].row.params / 1e6:.1f}M parameters)")
            except Exception as err:  # noqa: BLE001  a variant that fails still gets its row, with its error
                rows.append(DecodeRow(size, variant.label, 0, error=f"{type(err).__name__}: {err}"[:300]))
        # one phase per measure: prefill, then decode at each batch size from caches
        # prefilled for that phase only (at 86M and batch 8 each variant's caches are large)
        phases = [("prefill", None)] + [("decode", b) for b in sorted(set(cfg.batch_sizes))]
        shares = []
        for what, batch in phases:
            steps = [case.step(what, batch) for case in cases]
            log(f"{size}: timing {what}" + (f" at batch {batch}" if batch else ""))
            with CPUContention() as contention:
                timings = time_interleaved(steps, torch.zeros(1, device=device), cfg.repeats)
            shares.append(contention.share)
            for case, timing in zip(cases, timings):
                case.record(what, batch, timing.samples)
        for case in cases:
            case.row.peak_bytes = case.peak_bytes()
            case.row.cpu_contention = max((s for s in shares if s is not None), default=None)
            rows.append(case.row)
            case.model = None  # free the weights before the next size
    meta = {"device": cfg.device, "torch": torch.__version__, "config": asdict(cfg), "threads": torch.get_num_threads()}
    return rows, meta


class _Case:
    def __init__(self, variant: Variant, size: str, cfg: DecodeBenchConfig, device: torch.device):
        torch.manual_seed(cfg.seed)
        self.cfg, self.device = cfg, device
        config = parse_model_config(model_mapping(variant, size, cfg.max_seq_len, cfg.vocab_size))
        model = build_model(config).to(device).eval()
        self.model: CEMTransformer | None = model  # None once the run has timed this size (frees the weights)
        params = sum(p.numel() for p in model.parameters())
        self.row = DecodeRow(size, variant.label, params, recomputes=bool(missing_hooks(model)))
        g = torch.Generator().manual_seed(cfg.seed)
        batch = max(cfg.batch_sizes)
        self.prompt = torch.randint(0, cfg.vocab_size, (batch, cfg.context), generator=g).to(device)
        self.next_ids = torch.randint(0, cfg.vocab_size, (batch, cfg.new_tokens), generator=g).to(device)
        self.prefilled: DecodingCache | None = None
        cache = new_cache(model)  # the cache's size per token, from a short prompt
        decode(model, self.prompt[:1, : min(cfg.context, 8)], cache)
        self.row.cache_bytes_per_token = cache.bytes_per_token()

    def step(self, what: str, batch: int | None):
        """The timed callable of a phase (a decode phase first prefills, untimed, the
        cache every sample of it starts from)."""
        if what == "prefill":
            return lambda _: decode(self._model(), self.prompt[:1], new_cache(self._model()))
        assert batch is not None  # a decode phase names its batch size
        self.prefilled = new_cache(self._model())
        decode(self._model(), self.prompt[:batch], self.prefilled)
        return lambda _: self._decode(batch)

    def record(self, what: str, batch: int | None, samples: list[float]) -> None:
        if what == "prefill":
            self.row.prefill_s = samples
        else:
            self.row.decode_s[str(batch)] = samples
            self.prefilled = None

    def _model(self) -> CEMTransformer:
        assert self.model is not None  # freed only after the size's last timing
        return self.model

    def _decode(self, batch: int):
        assert self.prefilled is not None  # `step` prefilled it for this phase
        cache = _copy(self.prefilled)
        model = self._model()
        for i in range(self.cfg.new_tokens):
            decode(model, self.next_ids[:batch, i : i + 1], cache)

    def peak_bytes(self) -> int | None:
        batch = max(self.cfg.batch_sizes)

        def serve(_):
            model = self._model()
            cache = new_cache(model)
            decode(model, self.prompt[:batch], cache)
            for i in range(self.cfg.new_tokens):
                decode(model, self.next_ids[:batch, i : i + 1], cache)

        try:
            return step_peak_bytes(serve, self.prompt)
        except Exception:  # noqa: BLE001  the profiler may be unavailable; the row says "-"
            return None


def _copy(cache: DecodingCache) -> DecodingCache:
    return DecodingCache(cache.position, [dict(states) for states in cache.blocks], cache.recompute, cache.token_ids)


# -- results ------------------------------------------------------------------------------
def _median_ratio(samples: list[float], base: list[float]) -> float:
    """Speed ratio to the baseline: median over rounds of base time / own time (the
    rounds pair the samples, measure.time_interleaved)."""
    pairs = [b / s for s, b in zip(samples, base) if s > 0]
    return statistics.median(pairs) if pairs else math.nan


def ratios(rows: list[DecodeRow]) -> dict[tuple[str, str], dict[str, float]]:
    """(size, variant) -> each metric's ratio to the Llama row of the same size."""
    base = {r.size: r for r in rows if r.variant == BASELINE and r.error is None}
    out = {}
    for r in rows:
        b = base.get(r.size)
        if b is None or r.error is not None:
            continue
        entry = {
            "params": r.params / b.params,
            "cache": r.cache_bytes_per_token / b.cache_bytes_per_token if b.cache_bytes_per_token else math.nan,
            "prefill": _median_ratio(r.prefill_s, b.prefill_s),
            "peak": r.peak_bytes / b.peak_bytes if r.peak_bytes and b.peak_bytes else math.nan,
        }
        for batch, samples in r.decode_s.items():
            entry[f"decode_b{batch}"] = _median_ratio(samples, b.decode_s.get(batch, []))
        out[(r.size, r.variant)] = entry
    return out


def _fmt(value: float, ratio: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = f"{value:,.{digits}f}"
    return text if ratio is None or math.isnan(ratio) else f"{text} ({ratio:.2f}x)"


def table(rows: list[DecodeRow], cfg: dict) -> str:
    """One markdown table per size: each metric with its ratio to Llama."""
    r_all = ratios(rows)
    batches = [str(b) for b in cfg["batch_sizes"]]
    out = []
    for size in dict.fromkeys(r.size for r in rows):
        head = [
            "variant",
            "params (M)",
            "cache B/token",
            f"prefill tok/s ({cfg['context']})",
            *[f"decode tok/s b{b}" for b in batches],
            f"peak MB (b{max(cfg['batch_sizes'])})",
        ]
        lines = [
            f"{size}, context {cfg['context']}, {cfg['new_tokens']} decoded tokens per sample, "
            f"{cfg['repeats']} rounds (ratio to llama):",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        for r in (r for r in rows if r.size == size):
            if r.error is not None:
                lines.append(f"| {r.variant} | error: {r.error} |" + " |" * (len(head) - 2))
                continue
            q = r_all.get((size, r.variant), {})
            prefill = cfg["context"] / statistics.median(r.prefill_s) if r.prefill_s else math.nan
            decode_cells = []
            for b in batches:
                samples = r.decode_s.get(b, [])
                speed = int(b) * cfg["new_tokens"] / statistics.median(samples) if samples else math.nan
                decode_cells.append(_fmt(speed, q.get(f"decode_b{b}"), 1))
            peak = r.peak_bytes / MB if r.peak_bytes else math.nan
            name = r.variant + (" (recomputes: no decoding hook)" if r.recomputes else "")
            lines.append(
                "| "
                + " | ".join(
                    [
                        name,
                        _fmt(r.params / 1e6, q.get("params"), 1),
                        _fmt(r.cache_bytes_per_token, q.get("cache")),
                        _fmt(prefill, q.get("prefill")),
                        *decode_cells,
                        _fmt(peak, q.get("peak"), 1),
                    ]
                )
                + " |"
            )
        contention = [r.cpu_contention for r in rows if r.size == size and r.cpu_contention is not None]
        if contention and max(contention) > 0.05:
            lines.append(
                f"\nOther processes competed for the CPUs during {max(contention):.0%} of the timing: "
                "speeds and their ratios are unreliable."
            )
        out.append("\n".join(lines))
    return "\n\n".join(out)


def write_json(path: str | Path, rows: list[DecodeRow], meta: dict) -> None:
    r_all = ratios(rows)
    payload = {"meta": meta, "rows": [r.to_dict() | {"ratio_vs_llama": r_all.get((r.size, r.variant))} for r in rows]}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1))
