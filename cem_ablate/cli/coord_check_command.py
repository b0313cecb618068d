"""`cem-ablate coord-check CONFIG`: does every module's activation scale stay put as width grows?

The coordinate check of muP (cem_ablate/training/coord_check.py) for the `model:` of a run config
or study file's `base` (plugins included): the model at each of --widths (d_mlp in
proportion, heads and depth fixed), a few Adam steps on consecutive batches of the offline
corpus (--fixed-batch: the first one at every step),
mean |activation| of every module output before each step. Prints the slope of log mean|a| on
log width per module and step with the worst step's 95% interval, names the modules whose
slope lies beyond the bound and says whether each excess is resolved (one-sided t, Holm over
the table: 3 initializations showed a transient excess that 10 put within the bound), and draws
one log-log panel per module (PNG and SVG). Exit status 1 when a module exceeds it.

Under mup the check's base_d_model is the narrowest width unless --base-d-model says otherwise: the
base sets muP's constants, the check tests its exponents, and a width below the base runs hotter
attention and a larger per-entry lr than the base's (docs/results/coordinate-check.md).
A module over the bound is also fitted without the narrowest width: one within the bound there
"converges to the right" (mup's README: a finite-width effect, not a wrong exponent); the exit
status still counts it.

The bound is muP's desiderata: |slope| <= --threshold for every module at every step, but the
logits (the network output, O(1) in muP) may shrink with width before the last step, as muP's
random readout makes them at init (m^-1/2); --strict-output bounds them two-sided at every step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP_EPILOG = """examples:
  cem-ablate coord-check configs/tiny.yaml --parametrization mup --base-d-model 64
  cem-ablate coord-check studies/transfer.yaml --variant full_cem_T2 --widths 64,128,256,512 --steps 10
  cem-ablate coord-check configs/tiny.yaml model.attention.name=cem --parametrization standard
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = HELP_EPILOG
    parser.add_argument("config", help="run config YAML (its model:) or study file (its base.model:)")
    parser.add_argument("overrides", nargs="*", metavar="model.key=value", help="override model keys")
    parser.add_argument("--widths", default="64,128,256,512", help="d_model values (default 64,128,256,512)")
    parser.add_argument("--steps", type=int, default=10, help="Adam steps (default 10; step 1 is at init)")
    parser.add_argument("--variant", help="with a study file: the model of this variant (default: base.model)")
    parser.add_argument(
        "--lr",
        type=float,
        default=1e-3,
        help="Adam learning rate (default 1e-3, half the d 64 optimum of the CPU studies)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=10,
        help="initializations per width (default 10; their spread gives each slope's error)",
    )
    parser.add_argument(
        "--parametrization", choices=("standard", "mup"), help="override model.parametrization (default: the config's)"
    )
    parser.add_argument(
        "--base-d-model",
        type=int,
        help="model.base_d_model for the check (mup; default: the narrowest width, so that every "
        "width checked is at m >= 1: the exponents, not the base's constants, are checked)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.1,
        help="largest |slope| of log mean|activation| vs log width allowed (default 0.1)",
    )
    parser.add_argument(
        "--strict-output",
        action="store_true",
        help="bound the logits' |slope| at every step too (default: muP's O(1) output, "
        "slope <= +threshold before the last step; only a zero readout passes strict)",
    )
    parser.add_argument(
        "--fixed-batch",
        action="store_true",
        help="train on one batch repeated at every step (mup's default, fix_data=True); default: a "
        "fresh batch of the corpus at every step, which separates right from wrong exponents "
        "better here (docs/results/coordinate-check.md)",
    )
    parser.add_argument(
        "--out",
        default="reports/coord_check",
        help="folder for coord_check.png/.svg and coord_check.json (default reports/coord_check)",
    )


def run(args: argparse.Namespace) -> int:
    from cem_ablate.model.config import parse_model_config
    from cem_ablate.training.coord_check import CoordCheckSettings, model_at_width, run_coord_check

    widths = _checked_options(args)
    model = _config_model(args)
    base, base_note = _check_base(model, args.base_d_model, widths)
    for width in widths:  # the very mapping each width runs (the config's heads: d_model must divide)
        parse_model_config(model_at_width(model, width), path=f"--widths {width}")

    settings = CoordCheckSettings(
        widths=widths,
        steps=args.steps,
        lr=args.lr,
        seeds=args.seeds,
        threshold=args.threshold,
        strict_output=args.strict_output,
        fresh_batches=not args.fixed_batch,
    )
    print(
        f"coordinate check: widths {','.join(map(str, widths))}, {args.steps} Adam steps at lr {args.lr:g}"
        f"{' on one batch (--fixed-batch)' if args.fixed_batch else ''}, {args.seeds} seeds{base_note}",
        flush=True,
    )
    result = run_coord_check(model, settings, progress=lambda w, s: print(f"  d_model {w}, seed {s}: done", flush=True))
    print(result.table(resolved=resolved_excess(result)))
    _write_outputs(result, base, Path(args.out))
    return 1 if result.flagged() else 0


def _checked_options(args: argparse.Namespace) -> tuple[int, ...]:
    """The widths, once --widths, --steps, --seeds and --lr are checked (a ConfigError names the flag)."""
    from cem_ablate.config import ConfigError
    from cem_ablate.training.coord_check import widths_argument

    try:
        widths = widths_argument(args.widths)
    except ValueError as err:
        raise ConfigError("--widths", str(err)) from None
    for flag, value in (("--steps", args.steps), ("--seeds", args.seeds)):
        if value < 1:
            raise ConfigError(flag, f"must be at least 1, got {value}.")
    if not args.lr > 0:
        raise ConfigError("--lr", f"must be > 0, got {args.lr}.")
    return widths


def _config_model(args: argparse.Namespace) -> dict:
    """The `model:` mapping to check: the config's (or the study variant's), with the
    overrides, --parametrization and --base-d-model applied."""
    from cem_ablate.config import ConfigError, apply_overrides, load_yaml

    raw = load_yaml(args.config)
    if args.variant:
        model: dict | None = _variant_model(args.config, args.variant)
    else:
        model = (raw.get("base") or {}).get("model") if "base" in raw else raw.get("model")
    if not isinstance(model, dict):
        raise ConfigError("model", f"{args.config} has no model: mapping (nor base.model: in a study file).")
    model = apply_overrides({"model": model}, args.overrides)["model"]
    if args.parametrization:
        model["parametrization"] = args.parametrization
    if args.base_d_model is not None:
        model["base_d_model"] = args.base_d_model
    return model


def _check_base(model: dict, base_d_model: int | None, widths: tuple[int, ...]) -> tuple[int | None, str]:
    """Validate `model`; under mup, set the base_d_model the check runs with (the narrowest
    width unless --base-d-model gave one) in `model`. (that base or None, the note that says so)."""
    from cem_ablate.model.config import parse_model_config

    parsed = parse_model_config({**model, "vocab_size": 256})  # one error: line naming the key, before any work
    if parsed.parametrization != "mup":
        return None, ""
    base = parsed.base_d_model if base_d_model is not None else min(widths)
    base_note = f", base_d_model {base}"
    if base != parsed.base_d_model:
        # The base sets muP's constants, not its exponents; below it a model runs hotter attention
        # (tau = d_head / sqrt(d_head,base) < sqrt(d_head)) and a larger per-entry lr than the
        # base's, whose finite-width effects the slope would read as an exponent (measured: a base
        # above the narrowest width puts modules of four of the five families over the bound;
        # docs/results/coordinate-check.md).
        model["base_d_model"] = base
        base_note += (
            f" (the narrowest width; the config's is {parsed.base_d_model}: "
            f"--base-d-model {parsed.base_d_model} checks with it)"
        )
    return base, base_note


def _write_outputs(result, base: int | None, out: Path) -> None:
    """coord_check.png/.svg and coord_check.json (with the base_d_model checked, under mup) in `out`."""
    from cem_ablate.figures.coord_check import plot_coord_check

    out.mkdir(parents=True, exist_ok=True)
    plot_coord_check(result, out / "coord_check.png")
    record = result.to_dict()
    if base is not None:
        record["base_d_model"] = base
    (out / "coord_check.json").write_text(json.dumps(record, indent=1))
    print(f"figure: {out / 'coord_check.png'} (and .svg); data: {out / 'coord_check.json'}")


def resolved_excess(result, alpha: float = 0.05) -> dict[str, list[int]]:
    """Module -> the steps (0-based) where |slope| > threshold is resolved: the bench's one-sided
    t tests, Holm over every (module, step) of the table (one family, as a report's comparisons)."""
    from cem_ablate.analysis.decision import holm

    pvalues = result.exceedance_pvalues()
    out: dict[str, list[int]] = {}
    for (module, step), adjusted in zip(pvalues, holm(list(pvalues.values())) if pvalues else []):
        if adjusted <= alpha:
            out.setdefault(module, []).append(step)
    return out


def _variant_model(study_file: str, name: str) -> dict:
    """A study variant's validated model, as a mapping (the study file validated whole)."""
    from cem_ablate.cli.study_command import load_expanded
    from cem_ablate.config import ConfigError
    from cem_ablate.config.errors import unknown

    expanded = load_expanded(study_file, None, [])
    for v in expanded.variants:
        if v.name == name:
            model = v.config.model.to_mapping()
            model.pop("vocab_size", None)
            return model
    raise (
        unknown("--variant", name, [v.name for v in expanded.variants], what="variant")
        if expanded.variants
        else ConfigError("--variant", f"{study_file} has no variants.")
    )
