"""The coordinate check of muP (Tensor Programs V; `mup`'s coord check) for any model config.

For each width, the config's model is built with d_model = width (d_mlp in proportion, heads and
depth fixed) and trained for a few Adam steps on consecutive batches of byte tokens of the
standard-library corpus (the same batches at every width; `fresh_batches=False`: the first batch
at every step, mup's default). Before every step (step 1 = at init, as `mup` records it) the mean
|coordinate| of every module output is recorded:

    embedding        the token embeddings
    blocks.i.<sub>   a sublayer's increment f(h) - h (its own contribution to the stream)
    blocks.i.<sub>.step t   a recursion step's update x^{t+1} - x^t (or the direction eta Delta(u)
                     under momentum and in a parallel block's joint step)
    logits           the LM head's output

Under a parametrization in which hyperparameters transfer, none of these grows or shrinks with
width: the slope of log mean|a| against log width is ~0 at every step. A slope above the
threshold names the module that breaks transfer. Each (module, width, step) value is the
geometric mean over `seeds` initializations (the slope is fitted in log space).

A slope from a few initializations is itself noisy: one module's slope measured over the
threshold with 3 initializations and well within it with 10 (measured: docs/results/coordinate-check.md,
learning-rate transfer, "Coordinate check"). So the slope is
fitted to the mean over initializations of log mean|a| (each width's seeds averaged in log
space), it comes with its standard error from each width's seed-to-seed spread, and with a
one-sided t test of |slope| > threshold per (module, step) that `cem-ablate coord-check`
adjusts by Holm over the whole table (interval coverage and false-positive rates checked by
simulation in tests/training/test_coord_check.py).

The bound, per module, is muP's own desiderata (Tensor Programs V; `mup`'s README): every
(pre)activation Theta(1), two-sided, |slope| <= threshold at every step; the network output
O(1), one-sided, slope <= +threshold, and Theta(1) once trained, two-sided at the last step. So
the logits may shrink with width before the last step: muP's readout at init var ∝ 1/fan_in^2
makes them ∝ m^-1/2 at init, and that random part is load-bearing (zeroing or shrinking it
costs perplexity at the base width; measured: docs/results/readout.md); growing logits
(standard parametrization, a readout lr too large) and logits still shrinking at the last step
(a readout lr too small) exceed it. `strict_output` applies the two-sided bound to the logits at
every step too (only the zero readout passes that).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from scipy import stats
from torch import nn
from torch.utils.hooks import RemovableHandle

from cem_ablate.model.assembly import build_model
from cem_ablate.model.config import parse_model_config
from cem_ablate.model.protocol import SUBLAYER_KINDS
from cem_ablate.model.transformer import CEMTransformer
from cem_ablate.training.optimizer import build_adamw

BYTE_VOCAB = 256
OUTPUT_MODULE = "logits"  # the network output: O(1) before the last step (the module docstring)


@dataclass(frozen=True)
class CoordCheckSettings:
    widths: tuple[int, ...] = (64, 128, 256, 512)
    steps: int = 10
    lr: float = 1e-3
    seeds: int = 10
    batch_size: int = 8
    seq_len: int = 64
    weight_decay: float = 0.1
    eps: float = 1e-8
    threshold: float = 0.1
    strict_output: bool = False  # the logits' bound two-sided at every step, not only the last
    # A fresh batch of the corpus per step (mup's get_coord_data with fix_data=False), or one batch
    # repeated at every step (fix_data=True, mup's default). Fresh separates better: it passes
    # muP as built where one repeated batch flags a module, and it resolves more of the modules a
    # wrong hidden-lr exponent breaks (measured: docs/results/coordinate-check.md).
    fresh_batches: bool = True


@dataclass
class CoordCheckResult:
    settings: CoordCheckSettings
    parametrization: str
    # module -> width -> one row of per-step mean |activation| per initialization (seeds x steps)
    samples: dict[str, dict[int, list[list[float]]]] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, dict[int, list[float]]]:
        """module -> width -> per-step mean |activation|, the geometric mean over the
        initializations: what the slope is fitted to, so the panels show the fitted points."""
        with np.errstate(divide="ignore"):
            return {
                m: {w: np.exp(np.log(np.asarray(rows, dtype=float)).mean(axis=0)).tolist() for w, rows in bw.items()}
                for m, bw in self.samples.items()
            }

    def _fit(self, module: str, t: int, widths: Sequence[int] | None = None) -> tuple[float, float, float]:
        """(slope, standard error, degrees of freedom) at step t. The slope is sum_w c_w mean_w
        (c the OLS contrast on log width, mean_w over the n initializations of log mean|a|), so
        its variance is sum_w c_w^2 s_w^2 / n with each width's own spread s_w (ddof 1). Degrees
        of freedom n - 1, the smallest of any width's (conservative; Welch-Satterthwaite's put
        several times the nominal rate beyond Holm's cut-offs at 3 initializations in the
        simulation of tests/training/test_coord_check.py). Exactly 0 at every width (zero-init logits): (0, 0,
        inf); 0 or not finite at some widths only: nan; one initialization: no error (nan).
        `widths`: a subset of the settings' widths to fit (default all of them)."""
        widths = tuple(self.settings.widths if widths is None else widths)
        rows = np.asarray([[r[t] for r in self.samples[module][w]] for w in widths], dtype=float)
        if np.all(rows == 0):
            return 0.0, 0.0, math.inf
        if np.any(rows <= 0) or not np.all(np.isfinite(rows)):
            return math.nan, math.nan, math.nan
        x = np.log(np.asarray(widths, dtype=float))
        c = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
        logs = np.log(rows)
        n = logs.shape[1]
        slope = float(np.dot(c, logs.mean(axis=1)))
        if n < 2:
            return slope, math.nan, math.nan
        return slope, float(math.sqrt(np.sum(c**2 * logs.var(axis=1, ddof=1)) / n)), float(n - 1)

    def fits(self) -> dict[str, list[tuple[float, float, float]]]:
        """Per module, per step: (slope, standard error, degrees of freedom), as `_fit`."""
        return {module: [self._fit(module, t) for t in range(self.settings.steps)] for module in self.samples}

    def slopes(self) -> dict[str, list[float]]:
        """Per module, per step: the OLS slope on log width of log mean|a|, averaged over the
        initializations in log space (0 when the module is exactly 0 at every width, e.g.
        zero-init logits; nan when 0 at some widths only)."""
        return {module: [f[0] for f in per_step] for module, per_step in self.fits().items()}

    def slope_errors(self) -> dict[str, list[tuple[float, float]]]:
        """Per module, per step: (standard error, degrees of freedom) of the slope (`_fit`)."""
        return {module: [(f[1], f[2]) for f in per_step] for module, per_step in self.fits().items()}

    def may_shrink(self, module: str, t: int) -> bool:
        """Whether the bound at (module, step t) is one-sided (slope <= +threshold): the network
        output before the last step, unless `strict_output` (the module docstring)."""
        return module == OUTPUT_MODULE and t < self.settings.steps - 1 and not self.settings.strict_output

    def excess(self, module: str, t: int, slope: float) -> float:
        """How far `slope` lies beyond the bound at (module, step t); > 0 exceeds it."""
        return (slope if self.may_shrink(module, t) else abs(slope)) - self.settings.threshold

    def exceeds(self, module: str, t: int, slope: float) -> bool:
        return not math.isfinite(slope) or self.excess(module, t, slope) > 0

    def exceedance_pvalues(self) -> dict[tuple[str, int], float]:
        """(module, step) -> p of the one-sided t test of an excess over the bound (H0: slope
        within the threshold on the side the estimate lies; for the output before the last step,
        H0: slope <= +threshold), for every cell with a standard error. The caller adjusts over
        the family (cli.coord_check_command: Holm, analysis.decision)."""
        out = {}
        for module, per_step in self.fits().items():
            for t, (slope, se, df) in enumerate(per_step):
                if not (math.isfinite(slope) and math.isfinite(se)):
                    continue
                excess = self.excess(module, t, slope)
                out[(module, t)] = (0.0 if excess > 0 else 1.0) if se == 0 else float(stats.t.sf(excess / se, df))
        return out

    def flagged(self) -> list[str]:
        """Modules beyond the bound at some step (or undefined there)."""
        return [m for m, s in self.slopes().items() if any(self.exceeds(m, t, v) for t, v in enumerate(s))]

    def without_narrowest(self, module: str) -> dict[int, float]:
        """Step (0-based) -> the slope fitted without the narrowest width, at every step where the
        module exceeds its bound over all widths; empty with fewer than 4 widths (the fit without
        the narrowest keeps at least 3, as a slope with an intercept needs). mup's README
        reads a check by whether the curves "converge to the right" (a finite-width effect fades
        as width grows, a wrong exponent does not): measured, a module over the bound because of
        d 64 alone falls within it without d 64, while a wrong hidden-lr exponent stays over the
        bound without d 64 too (docs/results/coordinate-check.md). A
        point estimate, not a test: in simulation (tests/training/test_coord_check.py) an excess at
        d 64 alone mostly reads as converging, and a true power law rarely does, the less so the
        steeper it is (figures: docs/results/coordinate-check.md)."""
        widths = sorted(self.settings.widths)[1:]
        if len(widths) < 3:
            return {}
        over = [t for t in range(self.settings.steps) if self.exceeds(module, t, self._fit(module, t)[0])]
        return {t: self._fit(module, t, widths)[0] for t in over}

    def converges(self, module: str, rest: Mapping[int, float] | None = None) -> bool:
        """Whether every excess of `module` falls within the bound without the narrowest width
        (`rest`, default `without_narrowest(module)`); False with fewer than 4 widths (nothing to
        tell it by)."""
        rest = self.without_narrowest(module) if rest is None else rest
        return bool(rest) and all(not self.exceeds(module, t, v) for t, v in rest.items())

    def table(self, resolved: Mapping[str, Sequence[int]] | None = None) -> str:
        """The slopes, a row per module, with the worst step's 95% interval (t, the standard
        error above). With `resolved` (module -> steps where |slope| > threshold survives the
        caller's multiple-test adjustment) each flagged row says whether its excess is resolved."""
        fits = self.fits()
        flagged = self.flagged()
        steps = self.settings.steps
        head = (
            f"{'module':<30} "
            + " ".join(f"{'t' + str(t + 1):>6}" for t in range(steps))
            + f" {'max|s|':>7} {'95% interval':>15}"
        )
        lines = [
            f"coordinate check ({self.parametrization}): slope of log mean|activation| vs log width "
            f"{','.join(map(str, self.settings.widths))}, per Adam step (t1 = init), "
            f"{self.settings.seeds} initializations per width",
            head,
        ]
        for module, per_step in fits.items():
            s = [f[0] for f in per_step]
            magnitudes = [abs(v) if math.isfinite(v) else float("inf") for v in s]
            worst = max(magnitudes)
            value, se, df = per_step[magnitudes.index(worst)]
            if math.isfinite(se) and math.isfinite(worst):
                half = float(stats.t.ppf(0.975, df)) * se if se > 0 else 0.0
                interval = f"[{value - half:+.2f}, {value + half:+.2f}]"
            else:
                interval = "-"
            mark = ""
            if module in flagged:
                mark = f"  <- exceeds {self._where(module, s)}"
                if resolved is not None:
                    mark += (
                        f"; resolved at {self._steps_text(list(resolved[module]))}"
                        if resolved.get(module)
                        else "; not resolved"
                    )
                mark += self._narrowest_text(module)
            elif worst > self.settings.threshold:
                shrinking = [t for t, v in enumerate(s) if abs(v) > self.settings.threshold]
                mark = (
                    f"  (shrinks with width at {self._steps_text(shrinking)}: the output may, "
                    f"muP's O(1); within the bound at the last step)"
                )
            lines.append(f"{module:<30} " + " ".join(f"{v:>+6.2f}" for v in s) + f" {worst:>7.3f} {interval:>15}{mark}")
        output_rule = (
            ""
            if self.settings.strict_output or OUTPUT_MODULE not in fits
            else f" (the logits: slope <= +{self.settings.threshold} before the last step)"
        )
        lines.append(
            f"{len(flagged)} of {len(fits)} modules exceed |slope| {self.settings.threshold}{output_rule}"
            + (f": {', '.join(flagged)}" if flagged else "")
        )
        converging = [m for m in flagged if self.converges(m)]
        if converging:
            lines.append(
                f"within the bound without d {min(self.settings.widths)} (converge to the right, as a "
                f"finite-width effect at the narrowest width does; a point estimate, which a power law "
                f"of slope 0.12-0.15 also gives in 6-24% of simulated checks): {', '.join(converging)}"
            )
        if resolved is not None:
            beyond = [m for m in flagged if resolved.get(m)]
            lines.append(
                f"resolved beyond {self.settings.threshold} (one-sided t per slope, Holm over the table's "
                f"{sum(math.isfinite(f[0]) and math.isfinite(f[1]) for c in fits.values() for f in c)} slopes "
                f"with an error, 5%): "
                + (", ".join(beyond) if beyond else "none")
                + ("" if self.settings.seeds > 1 else " (one initialization: no standard errors)")
            )
        return "\n".join(lines)

    def _narrowest_text(self, module: str) -> str:
        """'; without d 64: -0.06 at t10, converges to the right' (or 'does not converge')."""
        rest = self.without_narrowest(module)
        if not rest:
            return ""
        t, worst = max(
            rest.items(), key=lambda kv: self.excess(module, kv[0], kv[1]) if math.isfinite(kv[1]) else math.inf
        )
        verdict = "converges to the right" if self.converges(module, rest) else "does not converge"
        return f"; without d {min(self.settings.widths)}: {worst:+.2f} at t{t + 1}, {verdict}"

    @staticmethod
    def _steps_text(over: list[int]) -> str:
        contiguous = over == list(range(over[0], over[-1] + 1))
        return (
            f"t{over[0] + 1}"
            if len(over) == 1
            else f"t{over[0] + 1}-t{over[-1] + 1}"
            if contiguous
            else ", ".join(f"t{t + 1}" for t in over)
        )

    def _where(self, module: str, slopes: list[float]) -> str:
        """At which steps and which way: a module that shrinks with width (mup's scaled readout:
        its random init part vanishes as m^-1/2) is told apart from one that grows (a blow-up)."""
        over = [t for t, v in enumerate(slopes) if self.exceeds(module, t, v)]
        ways = {"grows" if v > 0 else "shrinks" for v in (slopes[t] for t in over) if math.isfinite(v)}
        return f"at {self._steps_text(over)}" + (f" ({' and '.join(sorted(ways))} with width)" if ways else "")

    def to_dict(self) -> dict[str, Any]:
        flagged = self.flagged()
        return {
            "parametrization": self.parametrization,
            "settings": vars(self.settings),
            "values": {m: {str(w): v for w, v in bw.items()} for m, bw in self.values.items()},
            "samples": {m: {str(w): v for w, v in bw.items()} for m, bw in self.samples.items()},
            "slopes": self.slopes(),
            "slope_standard_errors": {m: [se for se, _ in e] for m, e in self.slope_errors().items()},
            "strict_output": self.settings.strict_output,
            "flagged": flagged,
            "converging": [m for m in flagged if self.converges(m)],
        }


def model_at_width(model: Mapping[str, Any], width: int) -> dict[str, Any]:
    """The `model:` mapping at d_model = width: d_mlp scaled in proportion (rounded to a multiple
    of 8, as the presets), heads and layers as the config has them, byte vocabulary."""
    dims = parse_model_config({**model, "vocab_size": BYTE_VOCAB}).dims
    out = {k: v for k, v in model.items() if k != "size"}
    d_mlp = max(8, int(round(dims.d_mlp * width / dims.d_model / 8)) * 8)
    out.update(d_model=width, n_layers=dims.n_layers, n_heads=dims.n_heads, d_mlp=d_mlp, vocab_size=BYTE_VOCAB)
    return out


def byte_batch(batch_size: int, seq_len: int) -> torch.Tensor:
    """A fixed batch of byte tokens from the standard library's sources (offline), rows in
    corpus order (so its first rows are the batch of any smaller batch_size)."""
    from cem_ablate.data.sources import stdlib_files, stdlib_root

    root, need = stdlib_root(), batch_size * (seq_len + 1)
    data = bytearray()
    for rel in stdlib_files(root):
        data += (root / rel).read_bytes()
        if len(data) >= need:
            break
    return torch.tensor(list(data[:need]), dtype=torch.long).view(batch_size, seq_len + 1)


ForwardHook = Callable[[nn.Module, tuple[Any, ...], Any], None]  # nn.Module.register_forward_hook's hook


class ActivationRecorder:
    """Forward hooks writing mean |output| of every module the check follows (module docstring)."""

    def __init__(self, model: CEMTransformer) -> None:
        self.current: dict[str, float] = {}
        self.counters: list[dict] = []
        self.handles: list[RemovableHandle] = []
        self.handles.append(model.embed_tokens.register_forward_hook(self._output("embedding")))
        self.handles.append(model.lm_head.register_forward_hook(self._output("logits")))
        for i, block in enumerate(model.blocks):
            if callable(getattr(block, "joint_step", None)):  # parallel: the block's joint increment
                self.handles.append(block.register_forward_hook(self._increment(f"blocks.{i}")))
            parallel = callable(getattr(block, "joint_step", None))
            for kind in SUBLAYER_KINDS:
                sub = getattr(block, kind)
                self.handles.append(sub.register_forward_hook(self._increment(f"blocks.{i}.{kind}")))
                if parallel or getattr(sub, "steps", 1) > 1:  # at T = 1 the one step is the increment
                    self._wrap_steps(sub, f"blocks.{i}.{kind}")

    def _store(self, name: str, value: torch.Tensor) -> None:
        self.current[name] = float(value.detach().abs().mean())

    def _output(self, name: str) -> ForwardHook:
        return lambda module, args, output: self._store(name, output)

    def _increment(self, name: str) -> ForwardHook:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            out = output[0] if isinstance(output, tuple) else output
            self._store(name, out - args[0])

        return hook

    def _wrap_steps(self, sub: nn.Module, name: str) -> None:
        """Record each recursion step of a component with the step protocol: `advance` (x ->
        x + eta Delta) where it is used, `direction` otherwise (momentum, parallel blocks)."""
        counter = {"t": 0, "inside": False}
        if not (callable(getattr(sub, "direction", None))):
            return
        self.counters.append(counter)
        self.handles.append(sub.register_forward_pre_hook(lambda *_: counter.update(t=0)))
        # torch's Module.__getattr__ types an attribute as Tensor | Module: here it is the step method
        direction = cast(Callable[..., torch.Tensor], sub.direction)
        advance = getattr(sub, "advance", None)

        def recorded_direction(u: torch.Tensor, ctx: Any) -> torch.Tensor:
            out = direction(u, ctx)
            if not counter["inside"]:
                self._store(f"{name}.step{counter['t']}", out)
                counter["t"] += 1
            return out

        def recorded_advance(x: torch.Tensor, u: torch.Tensor, ctx: Any) -> torch.Tensor:
            counter["inside"] = True
            assert advance is not None  # installed only where the component has one
            try:
                out = advance(x, u, ctx)
            finally:
                counter["inside"] = False
            self._store(f"{name}.step{counter['t']}", out - x)
            counter["t"] += 1
            return out

        # the instance's methods replaced; Module.__getattr__ types the attributes as Tensor | Module
        sub.direction = recorded_direction  # type: ignore[assignment]
        if advance is not None:
            sub.advance = recorded_advance  # type: ignore[assignment]

    def step_reset(self) -> None:
        """Before each forward: a parallel block calls `direction` without the sublayer's forward,
        so the step counters restart here too."""
        self.current = {}
        for counter in self.counters:
            counter["t"] = 0


def run_coord_check(
    model: Mapping[str, Any],
    settings: CoordCheckSettings = CoordCheckSettings(),
    progress: Callable[[int, int], object] | None = None,
) -> CoordCheckResult:
    """Train the model at every width for `settings.steps` Adam steps; record module outputs."""
    mapping = dict(model)
    parametrization = parse_model_config({**mapping, "vocab_size": BYTE_VOCAB}).parametrization
    # (steps or 1, B, L + 1): consecutive batches of the corpus, or the first one at every step
    batches = byte_batch(
        settings.batch_size * (settings.steps if settings.fresh_batches else 1), settings.seq_len
    ).view(-1, settings.batch_size, settings.seq_len + 1)
    # module -> width -> (seeds x steps) mean |activation| of each initialization
    samples: dict[str, dict[int, np.ndarray]] = defaultdict(dict)
    for width in settings.widths:
        cfg = parse_model_config(model_at_width(mapping, width))
        for seed in range(settings.seeds):
            torch.manual_seed(seed)
            net = build_model(cfg)
            recorder = ActivationRecorder(net)
            optimizer = build_adamw(
                net.parameter_groups(settings.weight_decay),
                lr=settings.lr,
                betas=(0.9, 0.95),
                eps=settings.eps,
                kernel="single",
            )
            for t in range(settings.steps):
                batch = batches[t % len(batches)]
                inputs, targets = batch[:, :-1], batch[:, 1:]
                recorder.step_reset()
                logits = net(inputs)
                loss = nn.functional.cross_entropy(logits.reshape(-1, BYTE_VOCAB), targets.reshape(-1))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                for name, value in recorder.current.items():
                    samples[name].setdefault(width, np.zeros((settings.seeds, settings.steps)))[seed, t] = value
            if progress is not None:
                progress(width, seed)
    result = CoordCheckResult(settings, parametrization)
    order = sorted(samples, key=_module_order)
    result.samples = {
        name: {w: samples[name][w].tolist() for w in settings.widths}
        for name in order
        if all(w in samples[name] for w in settings.widths)
    }
    return result


def _module_order(name: str) -> tuple:
    if name == "embedding":
        return (0,)
    if name == "logits":
        return (2,)
    parts = name.split(".")
    kind = SUBLAYER_KINDS.index(parts[2]) if len(parts) > 2 else -1
    step = int(parts[3][4:]) if len(parts) > 3 else -1
    return (1, int(parts[1]), kind, step)


def widths_argument(text: str) -> tuple[int, ...]:
    widths = tuple(int(w) for w in text.split(",") if w.strip())
    if len(widths) < 2 or any(w <= 0 for w in widths):
        raise ValueError(f"need at least two positive widths, got {text!r}")
    return widths
